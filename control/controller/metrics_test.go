package controller

import (
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := NewMetrics(reg)
	c.ObserveAssignment(3*time.Millisecond, map[string]int{"gw1": 2, "gw2": 1}, map[string]bool{"gw2": true}, 1, 2)
	c.ObserveAssignment(1*time.Millisecond, map[string]int{"gw1": 3, "gw3": 0}, map[string]bool{"gw3": true}, 0, 1)
	c.Moved("gw2", true)
	c.Moved("gw1", false)
	c.ObserveProbe("gw1", time.Millisecond, false)
	c.ObserveProbe("gw2", time.Second, true)
	c.SetReachable("gw1", true)
	c.SetReachable("gw2", false)
	c.ReconcileError("status")
	c.StatusWritten(false)
	c.StatusWritten(true)
	c.SetLeader(true)
	c.NodeCertificate("issued")
	c.NodeCertificate("issued")
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"egret_controller_egress_ips_assigned", []string{"node=gw1"}, 3},
		{"egret_controller_egress_ips_unassigned", nil, 0},
		{"egret_controller_egress_ips_without_standby", nil, 1},
		{"egret_controller_assignment_duration_seconds", nil, 2}, // sample count
		{"egret_controller_egress_ip_moves_total", nil, 2},
		{"egret_controller_failovers_total", []string{"node=gw2"}, 1},
		{"egret_controller_probe_duration_seconds", []string{"node=gw2"}, 1},
		{"egret_controller_probe_failures_total", []string{"node=gw1"}, 0},
		{"egret_controller_probe_failures_total", []string{"node=gw2"}, 1},
		{"egret_controller_node_held_down", []string{"node=gw1"}, 0},
		{"egret_controller_node_held_down", []string{"node=gw3"}, 1},
		{"egret_controller_node_reachable", []string{"node=gw2"}, 0},
		{"egret_controller_node_reachable", []string{"node=gw1"}, 1},
		{"egret_controller_reconcile_errors_total", []string{"kind=status"}, 1},
		{"egret_controller_reconcile_errors_total", []string{"kind=assign"}, 0},
		{"egret_controller_status_writes_total", nil, 1},
		{"egret_controller_status_conflicts_total", nil, 1},
		{"egret_controller_leader", nil, 1},
		{"egret_controller_node_certificates_total", []string{"result=issued"}, 2},
		{"egret_controller_node_certificates_total", []string{"result=denied"}, 0},
	}
	for _, ck := range checks {
		if got := promtest.MustSample(t, fams, ck.name, ck.labels...); got != ck.want {
			t.Errorf("%s%v = %v, want %v", ck.name, ck.labels, got, ck.want)
		}
	}
	if _, ok := promtest.Sample(fams, "egret_controller_egress_ips_assigned", "node=gw2"); ok {
		t.Error("a node that lost all its IPs keeps an assigned series")
	}
	if v, ok := promtest.Sample(fams, "egret_controller_failovers_total", "node=gw1"); !ok || v != 0 {
		t.Errorf("failovers of an assigned node that never failed: %v (present %v), want a series at 0", v, ok)
	}
	c.ForgetNode("gw2")
	fams, _ = reg.Gather()
	if _, ok := promtest.Sample(fams, "egret_controller_node_reachable", "node=gw2"); ok {
		t.Error("ForgetNode left the node's series")
	}
	// A nil *Metrics is a no-op, so components may run without metrics.
	var nilc *Metrics
	nilc.ObserveAssignment(time.Second, nil, nil, 0, 0)
	nilc.Moved("x", true)
	nilc.ObserveProbe("x", 0, true)
	nilc.SetReachable("x", true)
	nilc.ForgetNode("x")
	nilc.ReconcileError("x")
	nilc.StatusWritten(true)
	nilc.NodeCertificate("issued")
	nilc.SetLeader(true)
}
