package main

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/lab"
	"github.com/egret-gw/egret/metrics"
)

// samples of one process every 10 s from first to last, its RSS given by f.
func samplesOf(role string, pid int, first, last time.Duration, f func(at time.Duration) int) []procSample {
	var out []procSample
	for at := first; at <= last; at += 10 * time.Second {
		out = append(out, procSample{at: at, role: role, pid: pid, rssKiB: f(at)})
	}
	return out
}

// The judgement takes each end's median (one spike does not decide), judges
// only processes alive through the judged part, and skips one that ended
// in the warm-up.
func TestGrowth(t *testing.T) {
	const warm, end, every = 10 * time.Minute, 30 * time.Minute, 10 * time.Second
	flat := func(time.Duration) int { return 100_000 }
	var ss []procSample
	ss = append(ss, samplesOf("controller", 10, 0, end, func(at time.Duration) int {
		if at == end-20*time.Second {
			return 900_000 // one spike near the end
		}
		return 100_000
	})...)
	// Grows 10 % over the judged part: 100 000 → 110 000 KiB.
	ss = append(ss, samplesOf("gateway-g1", 11, 0, end, func(at time.Duration) int {
		if at < warm {
			return 100_000
		}
		return 100_000 + int(10_000*(at-warm)/(end-warm))
	})...)
	ss = append(ss, samplesOf("gateway-g2", 12, 0, 5*time.Minute, flat)...)              // rebooted in the warm-up
	ss = append(ss, samplesOf("gateway-g2", 13, 5*time.Minute, 15*time.Minute, flat)...) // rebooted inside
	ss = append(ss, samplesOf("gateway-g2", 14, 15*time.Minute, end, flat)...)           // started inside
	lines := growth(ss, warm, end, every)
	got := map[int]growthLine{}
	for _, g := range lines {
		got[g.pid] = g
	}
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4 (pid 12 ended in the warm-up): %+v", len(lines), lines)
	}
	if g := got[10]; !g.judged || g.ratio() != 0 {
		t.Errorf("controller: %+v, want judged and flat despite the spike", g)
	}
	if g := got[11]; !g.judged || g.ratio() < 0.08 || g.ratio() > 0.10 {
		t.Errorf("gateway-g1: %+v ratio %.3f, want judged near +9 %% (medians of the edge minutes)", g, g.ratio())
	}
	if g := got[13]; g.judged || !strings.Contains(g.why, "ended") {
		t.Errorf("pid 13: %+v, want not judged: ended", g)
	}
	if g := got[14]; g.judged || !strings.Contains(g.why, "started") {
		t.Errorf("pid 14: %+v, want not judged: started", g)
	}
	r := &soakResult{opts: soakOptions{duration: end}, growth: lines}
	if b := r.broken(); !strings.Contains(b, "gateway-g1 (pid 11) RSS grew") || strings.Contains(b, "controller") {
		t.Errorf("broken() = %q, want gateway-g1 over budget and nothing else", b)
	}
	if w, _ := worstGrowth(lines); w.pid != 11 {
		t.Errorf("worst = %+v, want pid 11", w)
	}
	if r := (&soakResult{growth: growth(ss[:0], warm, end, every)}).broken(); !strings.Contains(r, "no Egret process") {
		t.Errorf("no samples: broken() = %q, want it to say nothing was judged", r)
	}
}

func TestWithoutPod(t *testing.T) {
	m := []byte("# head\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: w1-p1\n  namespace: a\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: w1-p12\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: w1-p2\n")
	b, err := withoutPod(m, "w1-p1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "name: w1-p1\n") || !strings.Contains(string(b), "name: w1-p12\n") || !strings.Contains(string(b), "name: w1-p2\n") || !strings.HasPrefix(string(b), "# head\n---\n") {
		t.Errorf("withoutPod:\n%s", b)
	}
	if _, err := withoutPod(m, "w9-p9"); err == nil {
		t.Error("a pod the manifest lacks: no error")
	}
}

// The plots: one line per role, a rebooted gateway's continuing, samples a
// process did not answer left out, gateways only where asked.
func TestSeries(t *testing.T) {
	ss := []procSample{
		{at: time.Minute, role: "gateway-g1", pid: 1, goroutines: 10},
		{at: 2 * time.Minute, role: "controller", pid: 2, goroutines: 5},
		{at: 3 * time.Minute, role: "gateway-g1", pid: 3, goroutines: -1},
		{at: 4 * time.Minute, role: "gateway-g1", pid: 3, goroutines: 12},
	}
	all := series(ss, func(s procSample) float64 { return s.goroutines }, false)
	if len(all) != 2 || all[0].Name != "controller" || all[1].Name != "gateway-g1" || len(all[1].XY) != 2 || all[1].XY[1].Y != 12 {
		t.Errorf("series = %+v", all)
	}
	if gw := series(ss, func(s procSample) float64 { return s.goroutines }, true); len(gw) != 1 {
		t.Errorf("gateways only: %+v", gw)
	}
}

// The edit removes the whole list item: a remnant of its indentation would
// put the next key under the list and the object would not parse (a lab
// run found this: every pod of the object left as its node).
func TestWithoutLine(t *testing.T) {
	m := []byte("spec:\n  egressIPs:\n  - 192.0.2.101\n  - 192.0.2.103\n  namespaceSelector:\n    matchLabels: {}\n")
	b, err := withoutLine(m, "- 192.0.2.103")
	if err != nil {
		t.Fatal(err)
	}
	if want := "spec:\n  egressIPs:\n  - 192.0.2.101\n  namespaceSelector:\n    matchLabels: {}\n"; string(b) != want {
		t.Errorf("withoutLine:\n%s\nwant\n%s", b, want)
	}
	if _, err := withoutLine(m, "- 192.0.2.1"); err == nil {
		t.Error("no such line: no error")
	}
}

func TestMetricsAddrs(t *testing.T) {
	if gatewayMetrics != metrics.DefaultGatewayAddr || steerMetrics != metrics.DefaultSteerAddr || controllerMetrics != "127.0.0.1"+metrics.DefaultControllerAddr {
		t.Errorf("the soak scrapes %s, %s, %s; the binaries serve %s, %s, %s", gatewayMetrics, steerMetrics, controllerMetrics,
			metrics.DefaultGatewayAddr, metrics.DefaultSteerAddr, metrics.DefaultControllerAddr)
	}
}

// The soak keeps the quietest gateway running and reboots the busiest of
// the others.
func TestVictims(t *testing.T) {
	ips := func(a ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range a {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	st := &lab.Status{Gateways: []lab.GatewayStatus{
		{Name: "g1", EgressIPs: ips("192.0.2.101", "192.0.2.102")},
		{Name: "g2", EgressIPs: ips("192.0.2.103", "2001:db8::1")},
		{Name: "g3", EgressIPs: ips("192.0.2.104")},
	}}
	if k := quietest(st); k != "g3" {
		t.Errorf("quietest = %s, want g3 (one IPv4 address, the last of equals by name)", k)
	}
	if v := busiestExcept(st, "g1"); v != "g2" {
		t.Errorf("busiest but g1 = %s, want g2", v)
	}
	if v := busiestExcept(st, "g3"); v != "g1" || len(st.Gateways) != 3 {
		t.Errorf("busiest but g3 = %s (gateways %d), want g1 and the status untouched", v, len(st.Gateways))
	}
}
