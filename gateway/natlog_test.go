package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/natlog"
)

// TestNATLogCreateAndEnd: a pod's new flow is recorded with its binding
// when the processor makes it, and its end when expiry removes it, at the
// pipeline's times; a processor whose ring is full drops the record and
// counts it, and the packet still goes through.
func TestNATLogCreateAndEnd(t *testing.T) {
	f := newFixture(t, 64, testConfig())
	dir := t.TempDir()
	wall := time.Date(2026, 12, 4, 14, 2, 7, 0, time.UTC)
	clock := testNow
	l, err := natlog.New(natlog.Config{Dir: dir, Gateway: "gw-a", RingSize: 2,
		Clock: func() int64 { return clock }, Now: func() time.Time { return wall.Add(time.Duration(clock - testNow)) }})
	if err != nil {
		t.Fatal(err)
	}
	f.p.SetNATLog(l)
	w := f.p.NewProcessor(7)
	out := make([]byte, 2048)
	for sp := uint16(40000); sp < 40003; sp++ { // the third overflows the ring of 2
		p := pkt{src: pod1v4, dst: server4, proto: "udp", sport: sp, dport: 53}
		if r := processOne(w, testNow, tunnelFrame(t, podTun(), p.build(t)), out); r.Verdict != VerdictTx {
			t.Fatalf("pod packet: %v %v", r.Verdict, r.Reason)
		}
	}
	if s := l.Stats(); s.Dropped != 1 {
		t.Fatalf("%+v, want 1 dropped", s)
	}
	clock = testNow + int64(time.Second)
	l.Flush()
	end := testNow + int64(conntrack.DefaultTimeouts().UDP) + int64(time.Second)
	clock = end
	if n := w.Expire(end, 1<<16); n != 3 {
		t.Fatalf("%d expired, want 3", n)
	}
	// Two ends fit; the third is dropped, as its create was: every record
	// the ring took is written.
	l.Flush()
	es, bad, err := natlog.Entries(dir)
	if err != nil || bad != 0 {
		t.Fatal(err, bad)
	}
	if len(es) != 4 {
		t.Fatalf("%d entries: %+v", len(es), es)
	}
	if s := l.Stats(); s.Dropped != 2 || s.Written != 4 {
		t.Fatalf("%+v", s)
	}
	var eg netip.Addr
	for _, e := range es[:2] {
		if e.Event != "create" || !e.Time.Equal(wall) || e.PodIP != pod1v4.String() || e.DstIP != server4.String() || e.DstPort != 53 || e.Protocol != "udp" || e.Gateway != "gw-a" {
			t.Fatalf("create: %+v", e)
		}
		eg = netip.MustParseAddr(e.EgressIP)
	}
	if eg != egress4 {
		t.Fatalf("egress %v, want %v", eg, egress4)
	}
	got := natlog.Query(es, natlog.Question{IP: egress4, Port: es[0].EgressPort, At: wall.Add(time.Minute)})
	if len(got) != 1 || got[0].PodPort != es[0].PodPort || got[0].End == nil || !got[0].End.Equal(wall.Add(time.Duration(end-testNow))) {
		t.Fatalf("query: %v", got)
	}
}
