package flowsync

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestStandbyLogsAdoptions: the standby records each binding it adopts from
// its primary once, and its end when the primary ends the flow, so that
// "who was egress IP:port" has an answer on the standby after a failover.
func TestStandbyLogsAdoptions(t *testing.T) {
	a, b := newPipeline(t, 1<<12, egress, egress6), newPipeline(t, 1<<12)
	dir := t.TempDir()
	l, err := natlog.New(natlog.Config{Dir: dir, Gateway: "standby", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	b.SetNATLog(l)
	_, addr := standby(t, b)
	for i := range 20 {
		adopt(t, a, flow(i, conntrack.StateEstablished))
	}
	sa := newSync(t, "primary", testKey, a, nil)
	sa.SetPeers(map[netip.Addr]string{egress: addr, egress6: addr})
	sa.Start()
	waitMatch(t, a, b)
	for i := range 5 {
		f := flow(i, conntrack.StateEstablished)
		if !a.Abandon(&f) {
			t.Fatalf("flow %d not held by the primary", i)
		}
	}
	waitMatch(t, a, b)
	count := func() map[string]int {
		l.Flush()
		es, bad, err := natlog.Entries(dir)
		if err != nil || bad != 0 {
			t.Fatal(err, bad)
		}
		n := map[string]int{}
		for _, e := range es {
			if e.Gateway != "standby" {
				t.Fatalf("%+v", e)
			}
			n[e.Event]++
		}
		return n
	}
	nstest.Until(t, "20 adoptions and 5 ends in the standby's NAT log", 10*time.Second, func() (bool, string) {
		n := count()
		return n["adopt"] == 20 && n["end"] == 5 && n["create"] == 0, fmt.Sprint(n)
	})
	// A flow still held answers the question; an ended one does not, later.
	f := flow(7, conntrack.StateEstablished)
	es, _, _ := natlog.Entries(dir)
	got := natlog.Query(es, natlog.Question{IP: netip.AddrFrom16(f.NATAddr).Unmap(), Port: f.NATPort, At: time.Now().Add(time.Second)})
	if len(got) != 1 || got[0].PodPort != f.Orig.SrcPort || got[0].End != nil {
		t.Fatalf("%v", got)
	}
}
