package controller_test

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/internal/nstest"
)

// TestControllerLeasesFollowStatus: a running controller's probes lease
// each gateway the egress IPs its status places there; when a gateway stops
// answering and its IP moves, the other gateway's lease names both.
func TestControllerLeasesFollowStatus(t *testing.T) {
	port, hs := healthServers(t, 2)
	var mu sync.Mutex
	last := map[int][]netip.Addr{}
	record := func(i int) func(health.Grant) {
		return func(g health.Grant) {
			ips := slices.Clone(g.IPs)
			slices.SortFunc(ips, netip.Addr.Compare)
			mu.Lock()
			last[i] = ips
			mu.Unlock()
		}
	}
	d := &dirCluster{dir: t.TempDir()}
	names := []string{"egress-a", "egress-b"}
	for i, n := range names {
		hs[i].srv.SetLeaseHandler(record(i))
		d.applyNode(t, egressNode(n, hs[i].addr, fmt.Sprintf("192.168.126.%d/24", 2+i), true))
	}
	timeout := 1
	d.run(t, controller.Config{ReachabilityTotalTimeoutSeconds: &timeout, HealthPort: port})
	// Two objects: one node may host one IP of each.
	d.applyEgressIP(t, egressIP("group1", "192.168.126.11"))
	d.applyEgressIP(t, egressIP("group2", "192.168.126.102"))
	leasesMatchStatus := func() (bool, string) {
		want := map[int][]netip.Addr{}
		for _, o := range []string{"group1", "group2"} {
			for _, it := range d.status(t, o) {
				i := slices.Index(names, it.Node)
				if i < 0 {
					return false, fmt.Sprintf("status %v", d.status(t, o))
				}
				want[i] = append(want[i], netip.MustParseAddr(it.EgressIP))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range names {
			slices.SortFunc(want[i], netip.Addr.Compare)
			if len(want[i]) == 0 || !slices.Equal(last[i], want[i]) {
				return false, fmt.Sprintf("leases %v, status %v", last, want)
			}
		}
		return true, ""
	}
	nstest.Until(t, "each gateway leased the IP its status names", 10*time.Second, leasesMatchStatus)

	hs[0].srv.SetLeaseHandler(nil)
	hs[0].stop(t)
	nstest.Until(t, "egress-b leased both IPs", 20*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(last[1]) == 2, fmt.Sprint(last[1])
	})
}
