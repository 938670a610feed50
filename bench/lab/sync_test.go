package main

import (
	"strings"
	"testing"

	"github.com/egret-gw/egret/lab"
	"github.com/egret-gw/egret/metrics"
)

// The sync sides take single-queue IPv4 scenarios only (they run on one
// managed lab each).
func TestPickSync(t *testing.T) {
	if scs, err := pickSync("-sync", ""); err != nil || scs != nil {
		t.Fatalf("no scenarios: %v %v", scs, err)
	}
	scs, err := pickSync("-sync", "est-10k,est-1M")
	if err != nil || len(scs) != 2 || scs[0].Name != "est-10k" || scs[1].Name != "est-1M" {
		t.Fatalf("est-10k,est-1M: %v %v", scs, err)
	}
	for _, bad := range []string{"est-10k-2q", "est-10k-v6", "nope"} {
		if _, err := pickSync("-sync", bad); err == nil {
			t.Errorf("-sync %s accepted", bad)
		}
	}
}

// The cost table has a row for each scenario both sync sides ran, their
// ratios on over off, and nothing when a side is missing.
func TestSyncCostTable(t *testing.T) {
	rep := &report{Results: []*result{
		sideResult(sideSyncOff, "est-10k", 1000, 2000, 100),
		sideResult(sideSyncOff, "est-1M", 800, 900, 120),
		sideResult(sideSyncOn, "est-10k", 950, 2000, 105),
		sideResult(sideSyncOff, "cps", 10, 10, 1),
		sideResult(sideSyncOn, "cps", 10, 10, 1),
	}}
	rep.Results[2].Sync = &syncStats{RecordsSent: 12, PrimaryFlows: 10000, StandbyBackupFlows: 9990, FullResyncs: 1}
	got := rep.syncCost()
	if !strings.Contains(got, "| est-10k | 0.95x | 1.00x | 1.05x | 12 | 10000 / 9990 | 1, 0 |") {
		t.Fatalf("no est-10k row with the ratios on/off:\n%s", got)
	}
	if strings.Contains(got, "est-1M |") {
		t.Fatalf("a row for a scenario only one side ran:\n%s", got)
	}
	checkColumns(t, got)
	if !strings.Contains(rep.tables(), got) {
		t.Fatal("the tables leave out the sync's cost")
	}
	if (&report{Results: rep.Results[:2]}).syncCost() != "" {
		t.Fatal("a table without the sync-on side")
	}
}

// sideResult is a scenario's result on one side with these rates.
func sideResult(mode, name string, ndr, pdr, ns float64) *result {
	r := &result{Scenario: scenario{Name: name, Underlay: lab.UnderlayIPv4}, Mode: mode}
	r.NDR.Rate, r.PDR.Rate, r.NDR.Trial.TaskNsPerPacket = ndr, pdr, ns
	return r
}

// checkColumns fails unless every row of the markdown table in s, the
// heading and the rule under it included, has as many cells as the heading.
func checkColumns(t *testing.T, s string) {
	t.Helper()
	want := -1
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		if n := strings.Count(l, "|"); want < 0 {
			want = n
		} else if n != want {
			t.Errorf("%d cell borders in %q, the heading has %d:\n%s", n, l, want, s)
		}
	}
	if want < 0 {
		t.Errorf("no table in %q", s)
	}
}

// The sync sides read the gateway agents' metrics where they serve them.
func TestGatewayMetricsAddr(t *testing.T) {
	if gatewayMetricsAddr != metrics.DefaultGatewayAddr {
		t.Fatalf("bench/lab reads %s, the gateway serves %s", gatewayMetricsAddr, metrics.DefaultGatewayAddr)
	}
}
