package main

import (
	"strings"
	"testing"

	"github.com/egret-gw/egret/lab"
)

func TestNATLogCostTable(t *testing.T) {
	res := func(mode, name string, ndr, pdr, ns float64) *result {
		r := &result{Scenario: scenario{Name: name, Underlay: lab.UnderlayIPv4}, Mode: mode}
		r.NDR.Rate, r.PDR.Rate, r.NDR.Trial.TaskNsPerPacket = ndr, pdr, ns
		return r
	}
	rep := &report{Results: []*result{
		res(sideNATLogOff, "cps", 1000, 2000, 100),
		res(sideNATLogOff, "est-10k", 800, 900, 120),
		res(sideNATLogOn, "cps", 960, 2000, 104),
		res(sideSyncOn, "est-10k", 10, 10, 1),
	}}
	rep.Results[2].NATLog = &natlogStats{Written: 5000, Dropped: 3, FlowsNew: 2600}
	got := rep.natlogCost()
	if !strings.Contains(got, "| cps | 0.96x | 1.00x | 1.04x | 5000 / 3 | 2600 |") {
		t.Fatalf("no cps row with the ratios on/off:\n%s", got)
	}
	if strings.Contains(got, "est-10k |") {
		t.Fatalf("a row for a scenario only one side ran:\n%s", got)
	}
	if !strings.Contains(rep.tables(), got) {
		t.Fatal("the tables leave out the NAT log's cost")
	}
}
