package main

import (
	"fmt"
	"strings"

	"github.com/egret-gw/egret/lab"
)

// The sides that measure what the NAT log costs the gateway: the gateway
// agent of the managed lab without the flow sync (as sync-off), without
// the NAT log and with it (per flow, into the lab's folder). Their ratio
// is the log's cost.
const (
	sideNATLogOff = "natlog-off"
	sideNATLogOn  = "natlog-on"
)

// natlogStats is what the NAT log did during one scenario on the
// natlog-on side: records written and lost to a full ring.
type natlogStats struct {
	Written uint64 `json:"records_written"`
	Dropped uint64 `json:"records_dropped"`
	Failed  uint64 `json:"records_failed"`
	// FlowsNew is the flows the gateway made meanwhile (each one
	// record, and one more when it ends).
	FlowsNew uint64 `json:"flows_new"`
}

// measureNATLog runs fn (a scenario on the natlog-on side) and returns
// what gateway gw's NAT log did meanwhile.
func measureNATLog(spec *lab.Spec, gw string, fn func() error) (*natlogStats, error) {
	before, err := gatewayCounters(spec, gw)
	if err != nil {
		return nil, err
	}
	if err := fn(); err != nil {
		return nil, err
	}
	after, err := gatewayCounters(spec, gw)
	if err != nil {
		return nil, err
	}
	d := func(k string) uint64 { return after[k] - before[k] }
	return &natlogStats{Written: d("egret_natlog_records_written_total"), Dropped: d("egret_natlog_records_dropped_total"),
		Failed: d("egret_natlog_records_failed_total"), FlowsNew: d("egret_gateway_flows_created_total")}, nil
}

// natlogCost is the table of what the NAT log costs the gateway, natlog-on
// over natlog-off per scenario, when the run has both sides.
func (rep *report) natlogCost() string {
	var b strings.Builder
	for _, on := range rep.Results {
		off := rep.find(sideNATLogOff, on.Scenario.Name, on.Scenario.Underlay)
		if on.Mode != sideNATLogOn || off == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nThe NAT log's cost: the gateway agent logging every binding (" + sideNATLogOn +
				") over the same agent without the log (" + sideNATLogOff + "), each on a managed lab of its own, no flow sync:\n\n" +
				"| scenario | NDR on/off | PDR on/off | gateway ns/packet at NDR on/off | records written / lost (full ring) during the scenario | flows made |\n|---|---|---|---|---|---|\n")
		}
		st := "| |"
		if s := on.NATLog; s != nil {
			st = fmt.Sprintf("%d / %d | %d", s.Written, s.Dropped, s.FlowsNew)
		}
		fmt.Fprintf(&b, "| %s | %sx | %sx | %sx | %s |\n", on.Scenario.Name, ratio(on.NDR.Rate, off.NDR.Rate), ratio(on.PDR.Rate, off.PDR.Rate),
			ratio(on.NDR.Trial.TaskNsPerPacket, off.NDR.Trial.TaskNsPerPacket), st)
	}
	return b.String()
}
