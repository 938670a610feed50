package gateway

// Flow expiry: the periodic sweep and the reclaim before new flows.

import (
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/nat"
)

// reclaimBackoff is how long a processor leaves a full table alone after a
// reclaim scan found nothing expired in it: a table full of live flows must
// not cost a scan per batch.
const reclaimBackoff = int64(10 * time.Millisecond)

// reclaim makes room before a call that may open n flows when the table
// has fewer than n free: it removes up to n expired flows that the periodic
// sweep (Expire) has not reached yet, with Expire's bounded work, so that a
// table full of dead flows does not refuse live ones (conntrack_full is for
// a table full of live flows). It runs once per Process call, before any
// frame is looked up, so a batch sees the table that frames processed one
// by one would (the baseline in the tests).
func (pr *Processor) reclaim(now int64, n int) {
	if pr.ct.Len() <= pr.ct.Cap()-n || now < pr.reclaimAfter {
		return
	}
	got := pr.ct.Expire(now, n, pr.release)
	pr.stats.local.Counters[CounterFlowsExpired] += uint64(got)
	if got == 0 {
		pr.reclaimAfter = now + reclaimBackoff
	}
}

// Expire removes up to budget expired flows and releases their NAT ports.
// Call it periodically from the processor's goroutine (e.g. between batches).
func (pr *Processor) Expire(now int64, budget int) int {
	pr.now = now
	n := pr.ct.Expire(now, budget, pr.release)
	pr.stats.local.Counters[CounterFlowsExpired] += uint64(n)
	pr.stats.publish()
	return n
}

// releaseFlow is the end of a binding made or adopted here: its port goes
// back to the allocator and the NAT log records the end.
func (pr *Processor) releaseFlow(f *conntrack.Flow) {
	if pr.natlog != nil {
		pr.natlog.Push(&natlog.Record{Mono: pr.now, Flow: *f, Event: natlog.EventEnd})
	}
	o := &f.Orig
	pr.alloc.Release(o.Proto, nat.Addr(o.Src), o.SrcPort, nat.Addr(o.Dst), o.DstPort, nat.Addr(f.NATAddr), f.NATPort)
}
