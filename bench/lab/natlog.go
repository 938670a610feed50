package main

import (
	"fmt"

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
	return rep.costTable(sideNATLogOff, sideNATLogOn, "\nThe NAT log's cost: the gateway agent logging every binding ("+sideNATLogOn+
		") over the same agent without the log ("+sideNATLogOff+"), each on a managed lab of its own, no flow sync:\n\n",
		[]string{"records written / lost (full ring) during the scenario", "flows made"},
		func(on *result) []string {
			if s := on.NATLog; s != nil {
				return []string{fmt.Sprintf("%d / %d", s.Written, s.Dropped), fmt.Sprint(s.FlowsNew)}
			}
			return nil
		})
}
