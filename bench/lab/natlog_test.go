package main

import (
	"strings"
	"testing"
)

func TestNATLogCostTable(t *testing.T) {
	rep := &report{Results: []*result{
		sideResult(sideNATLogOff, "cps", 1000, 2000, 100),
		sideResult(sideNATLogOff, "est-10k", 800, 900, 120),
		sideResult(sideNATLogOn, "cps", 960, 2000, 104),
		sideResult(sideSyncOn, "est-10k", 10, 10, 1),
	}}
	rep.Results[2].NATLog = &natlogStats{Written: 5000, Dropped: 3, FlowsNew: 2600}
	got := rep.natlogCost()
	if !strings.Contains(got, "| cps | 0.96x | 1.00x | 1.04x | 5000 / 3 | 2600 |") {
		t.Fatalf("no cps row with the ratios on/off:\n%s", got)
	}
	if strings.Contains(got, "est-10k |") {
		t.Fatalf("a row for a scenario only one side ran:\n%s", got)
	}
	checkColumns(t, got)
	if !strings.Contains(rep.tables(), got) {
		t.Fatal("the tables leave out the NAT log's cost")
	}
}
