package gateway

// Tenant limits where flows are created: per pod and per egress IP
// (conntrack.Config.SourceLimit, NATLimit), and early drop in a full table
// and within a pod's or egress IP's own flows at its limit.

import (
	"errors"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/nat"
)

// admit refuses, before any NAT port is allocated, a new flow (original
// tuple t) on egress IP natAddr that its pod's or egress IP's limit would
// refuse: a pod at its limit costs no allocation on the egress IP others
// share. At a limit it first early-drops one of the pod's (or the egress
// IP's) own unanswered or closing flows, as a full table does (counted as
// flows_early_dropped): a pod opening flows nobody answers is not locked out
// by them for the UDP timeout, and it never takes another pod's place.
func (pr *Processor) admit(t *conntrack.Tuple, natAddr nat.Addr, now int64) DropReason {
	na := conntrack.Addr(natAddr)
	err := pr.ct.Admit(&t.Src, &na)
	if err == nil {
		return DropNone
	}
	var victim conntrack.Flow
	if !pr.ct.EarlyDropOwn(t, &t.Src, &na, now, &victim) {
		return refusal(err)
	}
	pr.releaseFlow(&victim)
	pr.stats.local.Counters[CounterFlowsEarlyDropped]++
	return refusal(pr.ct.Admit(&t.Src, &na))
}

// insertFlow inserts f; when the table is full it early-drops one
// unanswered or closing flow (releasing its port, counted as
// flows_early_dropped) and tries once more.
func (pr *Processor) insertFlow(f *conntrack.Flow, flags uint8, now int64) error {
	err := pr.ct.Insert(f, flags, now)
	if !errors.Is(err, conntrack.ErrFull) {
		return err
	}
	var victim conntrack.Flow
	if !pr.ct.EarlyDrop(&f.Orig, now, &victim) {
		return err
	}
	pr.releaseFlow(&victim)
	pr.stats.local.Counters[CounterFlowsEarlyDropped]++
	return pr.ct.Insert(f, flags, now)
}

// refusal is the drop reason for a flow-table error of a new flow
// (DropNone for nil); a taken reply tuple is nat_exhausted.
func refusal(err error) DropReason {
	switch {
	case err == nil:
		return DropNone
	case errors.Is(err, conntrack.ErrFull):
		return DropConntrackFull
	case errors.Is(err, conntrack.ErrSourceLimit):
		return DropPodFlowLimit
	case errors.Is(err, conntrack.ErrNATLimit):
		return DropEgressIPFlowLimit
	}
	return DropNATExhausted // the reply tuple was taken between Allocate and Insert
}
