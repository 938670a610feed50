package steer

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSteerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	drops, dropErr := uint64(7), error(nil)
	s := NewMetrics(reg, func() (uint64, error) { return drops, dropErr })
	s.RegisterTunnelDrops(reg, func() (uint64, error) { return 5, nil })
	s.ObserveApply(4, 6, 3, 1, nil)
	s.ObserveApply(9, 9, 9, 9, errors.New("netlink: busy")) // failed: gauges keep the last good state
	var nilSteer *Metrics
	nilSteer.ObserveApply(1, 1, 1, 1, nil)

	want := `
# HELP egret_steer_apply_errors_total Reconcile passes whose kernel update failed (retried with backoff; the kernel keeps its last state).
# TYPE egret_steer_apply_errors_total counter
egret_steer_apply_errors_total 1
# HELP egret_steer_fail_closed_drops_total Packets dropped by the fail-closed filter: from selected pods that would have left outside the tunnel, or from pod addresses the agent has not classified yet (nftables counters).
# TYPE egret_steer_fail_closed_drops_total counter
egret_steer_fail_closed_drops_total 7
# HELP egret_steer_tunnel_drops_total Packets dropped by the tunnel rules: frames of the tunnel's VNI from an address that is no known gateway VTEP, and pods' own VXLAN or Geneve to a gateway VTEP (nftables counters).
# TYPE egret_steer_tunnel_drops_total counter
egret_steer_tunnel_drops_total 5
# HELP egret_steer_reconciles_total Reconcile passes (desired state computed and applied to the kernel).
# TYPE egret_steer_reconciles_total counter
egret_steer_reconciles_total 2
# HELP egret_steer_routes Routes the agent has programmed in its tables (towards the gateways).
# TYPE egret_steer_routes gauge
egret_steer_routes 6
# HELP egret_steer_rules Policy routing rules the agent has programmed (one per selected pod address and family).
# TYPE egret_steer_rules gauge
egret_steer_rules 4
`
	names := []string{"egret_steer_apply_errors_total", "egret_steer_fail_closed_drops_total",
		"egret_steer_reconciles_total", "egret_steer_routes", "egret_steer_rules", "egret_steer_tunnel_drops_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// An unreadable counter reports the last value, not 0 (a counter must not go back).
	drops, dropErr = 0, errors.New("nftables: gone")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "egret_steer_fail_closed_drops_total"); err != nil {
		t.Fatalf("after a failed read: %v", err)
	}
	if n, err := testutil.GatherAndLint(reg); err != nil || len(n) > 0 {
		t.Fatalf("promlint: %v %v", n, err)
	}
}
