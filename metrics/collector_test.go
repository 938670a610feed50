package metrics

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/internal/promtest"
	"github.com/egret-gw/egret/nat"
)

func TestGatewayCollectorMatchesPipeline(t *testing.T) {
	p := newHarnessPipeline(t, 1<<14)
	h := newHarness(t, p, 2)
	const rounds = 50
	for _, w := range h.workers {
		for i := 0; i < rounds; i++ {
			h.round(w)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewGatewayCollector(h.source()))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := p.Stats()
	perWorker := len(h.workers[0].frames)
	if got := want.Count(gateway.CounterRx); got != uint64(2*(rounds*perWorker+24)) {
		t.Fatalf("pipeline saw %d frames, harness sent %d", got, 2*(rounds*perWorker+24))
	}
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"egret_gateway_pipeline_received_packets_total", nil, float64(want.Count(gateway.CounterRx))},
		{"egret_gateway_forwarded_packets_total", nil, float64(want.Count(gateway.CounterForwarded))},
		{"egret_gateway_replied_packets_total", nil, float64(want.Count(gateway.CounterReplied))},
		{"egret_gateway_passed_packets_total", nil, float64(want.Count(gateway.CounterPass))},
		{"egret_gateway_flows_created_total", nil, 48},
		{"egret_gateway_flows_moved_total", nil, 0},
		{"egret_gateway_flows_picked_up_total", nil, 0},
		{"egret_gateway_flows", nil, 48},
		{"egret_gateway_flows_max", nil, float64(p.Conntrack().Cap())},
		{"egret_gateway_dropped_packets_total", []string{"reason=unknown_vtep"}, 2 * rounds},
		{"egret_gateway_dropped_packets_total", []string{"reason=spoofed_source"}, 2 * rounds},
		{"egret_gateway_dropped_packets_total", []string{"reason=conntrack_full"}, 0},
		{"egret_gateway_dropped_packets_total", []string{"reason=no_buffer"}, 0},
		{"egret_gateway_nat_ports_in_use", []string{"egress_ip=192.0.2.10", "protocol=udp"}, 24},
		{"egret_gateway_nat_ports_in_use", []string{"egress_ip=192.0.2.11", "protocol=udp"}, 24},
		{"egret_gateway_nat_ports_in_use", []string{"egress_ip=192.0.2.10", "protocol=tcp"}, 0},
		{"egret_gateway_nat_ports_max", []string{"egress_ip=192.0.2.10", "protocol=udp"}, 65535 - 1024 + 1},
		{"egret_gateway_nat_port_exhaustion_total", []string{"egress_ip=192.0.2.10"}, 0},
		{"egret_gateway_egress_ips", nil, 2},
		{"egret_gateway_tunnel_peers", nil, 2},
		{"egret_gateway_workers", nil, 2},
		{"egret_gateway_interface_received_packets_total", []string{"interface=eth-outside"}, 2 * rounds * 20},
		{"egret_gateway_interface_sent_packets_total", []string{"interface=eth-outside"}, 2 * rounds * 24},
		{"egret_gateway_interface_sent_packets_total", []string{"interface=eth-underlay"}, 2 * rounds * 20},
		{"egret_gateway_interface_received_bytes_total", []string{"interface=eth-underlay"}, float64(h.ifs[ifUnderlay].rxB.Load())},
	}
	for _, c := range checks {
		if got := promtest.MustSample(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	var dropSum float64
	for _, r := range gateway.DropReasons() {
		dropSum += promtest.MustSample(t, fams, "egret_gateway_dropped_packets_total", "reason="+r.String())
	}
	var wantDrops uint64
	for _, d := range want.Drops {
		wantDrops += d
	}
	if dropSum != float64(wantDrops) {
		t.Errorf("drops by reason sum to %v, pipeline counted %d", dropSum, wantDrops)
	}
	for i := range h.workers {
		if b := promtest.MustSample(t, fams, "egret_gateway_worker_busy_seconds_total", fmt.Sprintf("worker=%d", i)); b <= 0 {
			t.Errorf("worker %d busy seconds %v, want > 0", i, b)
		}
	}
	// AF_XDP series only appear for XDP interfaces; the harness has none.
	if _, ok := promtest.Sample(fams, "egret_gateway_xdp_socket_rx_dropped_total", "interface=eth-outside"); ok {
		t.Error("XDP ring series reported for an interface without AF_XDP statistics")
	}
}

func TestGatewayCollectorLint(t *testing.T) {
	p := newHarnessPipeline(t, 1<<12)
	h := newHarness(t, p, 1)
	h.round(h.workers[0])
	src := h.source()
	inner := src.Interfaces
	src.Interfaces = func(dst []InterfaceStats) []InterfaceStats {
		dst = inner(dst)
		dst[0].HasXDP, dst[0].XDP = true, XDPRingStats{RxDropped: 1, FillRingEmpty: 2}
		return dst
	}
	problems, err := testutil.CollectAndLint(NewGatewayCollector(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
}

func TestGatewayCollectorPartialSources(t *testing.T) {
	p := newHarnessPipeline(t, 1<<12)
	w := p.NewProcessor(1)
	processOne(w, 0, podFrame(t, 0, 1000, 10, hStranger), make([]byte, 2048))
	// Only a pipeline: sums, no per-worker series, no panic on nil funcs.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewGatewayCollector(GatewaySource{Pipeline: p}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if v := promtest.MustSample(t, fams, "egret_gateway_dropped_packets_total", "reason=unknown_vtep"); v != 1 {
		t.Fatalf("unknown_vtep drops %v, want 1", v)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.Contains(n, "busy") || strings.Contains(n, "nat_ports") || strings.Contains(n, "interface_") {
			t.Errorf("series %s reported without its source", n)
		}
	}
	// An empty source is valid too (a gateway before its first worker).
	reg2 := prometheus.NewPedanticRegistry()
	reg2.MustRegister(NewGatewayCollector(GatewaySource{}))
	if _, err := reg2.Gather(); err != nil {
		t.Fatal(err)
	}
}

func TestGatewayCollectorExhaustion(t *testing.T) {
	ct := newHarnessPipeline(t, 1<<12).Conntrack() // only for a table
	_ = ct
	// A NAT range of one port: the second flow to the same destination
	// is refused and counted on its egress IP.
	cfg := nat.DefaultConfig()
	cfg.PortMin, cfg.PortMax = 40000, 40000
	cfg.PreservePort = false
	p2, err := gateway.NewPipeline(ct, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gateway.NewSnapshot(harnessConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Swap(s); err != nil {
		t.Fatal(err)
	}
	w := p2.NewProcessor(7)
	out := make([]byte, 2048)
	for sport := uint16(30000); sport < 30003; sport++ {
		processOne(w, 0, podFrame(t, 0, sport, 10, hNodeVTEP[0]), out)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewGatewayCollector(GatewaySource{Pipeline: p2,
		EgressIPs: func(dst []netip.Addr) []netip.Addr { return append(dst, hEgress[0]) }}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if v := promtest.MustSample(t, fams, "egret_gateway_nat_port_exhaustion_total", "egress_ip=192.0.2.10"); v != 2 {
		t.Errorf("exhaustion count %v, want 2", v)
	}
	if v := promtest.MustSample(t, fams, "egret_gateway_dropped_packets_total", "reason=nat_exhausted"); v != 2 {
		t.Errorf("nat_exhausted drops %v, want 2", v)
	}
	if v := promtest.MustSample(t, fams, "egret_gateway_nat_ports_in_use", "egress_ip=192.0.2.10", "protocol=udp"); v != 1 {
		t.Errorf("ports in use %v, want 1", v)
	}
	if v := promtest.MustSample(t, fams, "egret_gateway_nat_ports_max", "egress_ip=192.0.2.10", "protocol=udp"); v != 1 {
		t.Errorf("ports max %v, want 1", v)
	}
}

func TestMergeInterfaces(t *testing.T) {
	in := []InterfaceStats{
		{Name: "a", RxPackets: 1, TxBytes: 5, HasBytes: true},
		{Name: "b", RxPackets: 10},
		{Name: "a", RxPackets: 2, HasXDP: true, XDP: XDPRingStats{RxRingFull: 3}},
	}
	out := mergeInterfaces(in)
	if len(out) != 2 || out[0].Name != "a" || out[0].RxPackets != 3 || out[0].TxBytes != 5 ||
		!out[0].HasBytes || !out[0].HasXDP || out[0].XDP.RxRingFull != 3 || out[1].RxPackets != 10 {
		t.Fatalf("merge = %+v", out)
	}
}
