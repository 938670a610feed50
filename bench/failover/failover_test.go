package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egret-gw/egret/lab"
)

// The summary pools the old connections of every kill, counts the broken
// ones, and the report files carry the figures.
func TestSummaryAndReport(t *testing.T) {
	r := &Result{ReachabilitySeconds: 1, Kills: []Kill{
		{Gateway: "g1", StatusMs: 1000, NewConnMs: 1300, OldConnMs: []float64{1500, 1700}},
		{Gateway: "g2", StatusMs: 1200, NewConnMs: 1400, OldConnMs: []float64{1600}, OldBroken: 2},
	}}
	r.summarize()
	if r.Status != (Percentiles{N: 2, P50: 1000, P99: 1200, Max: 1200}) || r.OldConn.N != 3 || r.OldConn.P50 != 1600 || r.OldBroken != 2 {
		t.Fatalf("summary %+v %+v broken %d", r.Status, r.OldConn, r.OldBroken)
	}
	dir := t.TempDir()
	if err := write(dir, r); err != nil {
		t.Fatal(err)
	}
	var back Result
	b, err := os.ReadFile(filepath.Join(dir, "failover.json"))
	if err != nil || json.Unmarshal(b, &back) != nil || len(back.Kills) != 2 || back.NewConn.P99 != 1400 {
		t.Fatalf("failover.json: %v %+v", err, back)
	}
	md, err := os.ReadFile(filepath.Join(dir, "failover.md"))
	if err != nil || !strings.Contains(string(md), "| first packet through the new gateway, old connection | 1600 ms | 1700 ms | 1700 ms | 3 |") ||
		!strings.Contains(string(md), "broken (reset, or no answer within the wait): 2") {
		t.Errorf("failover.md: %v\n%s", err, md)
	}
	if fi, err := os.Stat(filepath.Join(dir, "failover-cdf.png")); err != nil || fi.Size() == 0 {
		t.Errorf("failover-cdf.png: %v", err)
	}
}

// The gateways take turns; one that hosts no IPv4 egress IP is skipped.
func TestVictim(t *testing.T) {
	st := &lab.Status{
		Gateways: []lab.GatewayStatus{{Name: "g3"}, {Name: "g1"}, {Name: "g2"}},
		Assignment: []lab.AssignmentStatus{
			{EgressIP: "blue", IP: netip.MustParseAddr("192.0.2.101"), Node: "g1"},
			{EgressIP: "dual", IP: netip.MustParseAddr("2001:db8:2::104"), Node: "g2"},
			{EgressIP: "green", IP: netip.MustParseAddr("192.0.2.102"), Node: "g3"},
		},
	}
	for k, want := range []string{"g1", "g3", "g3", "g1"} {
		if got := victim(st, k); got != want {
			t.Errorf("victim(kill %d) = %s, want %s", k, got, want)
		}
	}
	if got := victim(&lab.Status{Gateways: st.Gateways}, 0); got != "" {
		t.Errorf("victim with nothing assigned = %q", got)
	}
}
