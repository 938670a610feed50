package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestServer(t *testing.T) {
	reg := NewRegistry("v1.2.3")
	notReady := errors.New("no configuration snapshot yet")
	srv, err := Serve("127.0.0.1:0", reg, func() error { return notReady })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	base := "http://" + srv.Addr()

	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	want := `egret_build_info{goversion="` + runtime.Version() + `",revision="`
	if !strings.Contains(body, want) || !strings.Contains(body, `version="v1.2.3"} 1`) {
		t.Fatalf("/metrics lacks build info %q:\n%s", want, body)
	}
	if !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_start_time_seconds") {
		t.Fatal("/metrics lacks the Go and process collectors")
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	code, body = get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, notReady.Error()) {
		t.Fatalf("/readyz while not ready: %d %q", code, body)
	}
	srv.SetReady(nil)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz when ready: %d", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("server still answers after Close")
	}
}

func TestServeErrors(t *testing.T) {
	if _, err := Serve("127.0.0.1:0", nil, nil); err == nil {
		t.Fatal("Serve accepted a nil registry")
	}
	if _, err := Serve("not an address", prometheus.NewRegistry(), nil); err == nil || !strings.Contains(err.Error(), "not an address") {
		t.Fatalf("bad address: %v", err)
	}
	a, err := Serve("127.0.0.1:0", prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if _, err := Serve(a.Addr(), prometheus.NewRegistry(), nil); err == nil {
		t.Fatal("second server on a busy port did not fail")
	}
}

func TestControl(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := NewControl(reg)
	c.ObserveAssignment(3*time.Millisecond, map[string]int{"gw1": 2, "gw2": 1}, 1)
	c.ObserveAssignment(1*time.Millisecond, map[string]int{"gw1": 3}, 0)
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
		{"egret_controller_assignment_duration_seconds", nil, 2}, // sample count
		{"egret_controller_egress_ip_moves_total", nil, 2},
		{"egret_controller_failovers_total", []string{"node=gw2"}, 1},
		{"egret_controller_probe_duration_seconds", []string{"node=gw2"}, 1},
		{"egret_controller_probe_failures_total", []string{"node=gw1"}, 0},
		{"egret_controller_probe_failures_total", []string{"node=gw2"}, 1},
		{"egret_controller_node_reachable", []string{"node=gw2"}, 0},
		{"egret_controller_node_reachable", []string{"node=gw1"}, 1},
		{"egret_controller_reconcile_errors_total", []string{"kind=status"}, 1},
		{"egret_controller_reconcile_errors_total", []string{"kind=assign"}, 0},
		{"egret_controller_status_writes_total", nil, 1},
		{"egret_controller_status_conflicts_total", nil, 1},
		{"egret_controller_leader", nil, 1},
	}
	for _, ck := range checks {
		if got := mustSample(t, fams, ck.name, ck.labels...); got != ck.want {
			t.Errorf("%s%v = %v, want %v", ck.name, ck.labels, got, ck.want)
		}
	}
	if _, ok := sample(fams, "egret_controller_egress_ips_assigned", "node=gw2"); ok {
		t.Error("a node that lost all its IPs keeps an assigned series")
	}
	if v, ok := sample(fams, "egret_controller_failovers_total", "node=gw1"); !ok || v != 0 {
		t.Errorf("failovers of an assigned node that never failed: %v (present %v), want a series at 0", v, ok)
	}
	c.ForgetNode("gw2")
	fams, _ = reg.Gather()
	if _, ok := sample(fams, "egret_controller_node_reachable", "node=gw2"); ok {
		t.Error("ForgetNode left the node's series")
	}
	// A nil *Control is a no-op, so components may run without metrics.
	var nilc *Control
	nilc.ObserveAssignment(time.Second, nil, 0)
	nilc.Moved("x", true)
	nilc.ObserveProbe("x", 0, true)
	nilc.SetReachable("x", true)
	nilc.ForgetNode("x")
	nilc.ReconcileError("x")
	nilc.StatusWritten(true)
	nilc.SetLeader(true)
}
