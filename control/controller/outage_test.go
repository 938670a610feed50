package controller_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/internal/nstest"
)

// Every gateway fails its check (their health servers stop, as when the
// controller's probes all time out at once) and then answers again: the
// failure is believed after the second look, which an assignment of its
// own runs (nothing else changes meanwhile), and when the gateways return
// none is held down, so the IPs go back to them instead of staying on no
// node for the hold-down (30 s here, the default).
func TestEveryGatewayFailingAtOnce(t *testing.T) {
	port, hs := healthServers(t, 2)
	d := &dirCluster{dir: t.TempDir()}
	names := []string{"egress-a", "egress-b"}
	for i, n := range names {
		d.applyNode(t, egressNode(n, hs[i].addr, fmt.Sprintf("192.168.126.%d/24", 2+i), true))
	}
	timeout := 1
	ctrl := d.run(t, controller.Config{ReachabilityTotalTimeoutSeconds: &timeout, HealthPort: port})
	reg := registries[ctrl]
	d.applyEgressIP(t, egressIP("group1", "192.168.126.11", "192.168.126.102"))
	placed := func(n int) func() (bool, string) {
		return func() (bool, string) {
			items := d.status(t, "group1")
			placed := 0
			for _, it := range items {
				if it.Node != "" {
					placed++
				}
			}
			return placed == n, fmt.Sprint(items)
		}
	}
	nstest.Until(t, "group1 assigned", 10*time.Second, placed(2))

	for _, h := range hs {
		h.stop(t)
	}
	nstest.Until(t, "group1 on no node after the second look", 20*time.Second, placed(0))

	for _, h := range hs {
		h.start(t)
	}
	heldDown := false
	nstest.Until(t, "group1 back on the gateways, or a gateway held down", 20*time.Second, func() (bool, string) {
		for _, n := range names {
			if v, _ := gathered(t, reg, "egret_controller_node_held_down", n); v == 1 {
				heldDown = true
				return true, ""
			}
		}
		return placed(2)()
	})
	if heldDown {
		t.Fatal("a gateway returning from an outage of every gateway was held down: its IPs stay on no node meanwhile")
	}
}
