package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/egret-gw/egret/lab"
)

// sideEgretBusyPoll is Egret's gateway with --busy-poll (-busy-poll adds
// it): its workers busy-poll their AF_XDP sockets instead of sleeping in
// poll(2), on the same lab, rig and core as the egret side.
const sideEgretBusyPoll = "egret-busy-poll"

// egretSide reports whether side runs Egret's own gateway on the static
// lab (with or without busy polling).
func egretSide(side string) bool { return side == lab.ModeEgret || side == sideEgretBusyPoll }

// busyPollNap is the busy-poll side's --busy-poll-nap. The lab runs the
// gateway's threads SCHED_FIFO on a core the machine's other work shares,
// and the kernel throttles real-time threads that keep a core past 95 %
// of a second: a worker that only spins is stopped for the rest of each
// second, with its device, and the veth's 256-frame ring overflows. A
// worker that naps when it finds nothing leaves the core often enough,
// and 20 µs is a tenth of the interface's gro_flush_timeout.
const busyPollNap = 20 * time.Microsecond

// egretBusyPoll is the busy-poll side's gateway.
func egretBusyPoll(bin string, limits lab.FlowLimits) lab.Impl {
	return lab.Egret{Binary: bin, FlowLimits: limits, BusyPoll: true, BusyPollNap: busyPollNap}
}

// busyPollCost is the lines comparing Egret with busy polling against
// Egret without, per scenario both ran (same run, interleaved), and the
// issue's latency target: each side's p99 at half the kernel's NDR over
// the kernel's p99 there.
func (rep *report) busyPollCost() string {
	var rows []string
	for _, b := range rep.Results {
		if b.Mode != sideEgretBusyPoll {
			continue
		}
		e := rep.find(lab.ModeEgret, b.Scenario.Name, b.Scenario.Underlay)
		if e == nil {
			continue
		}
		p99, bk, ek := "n/a", "n/a", "n/a"
		bl, el := latencyAt(b, "50% of kernel NDR"), latencyAt(e, "50% of kernel NDR")
		if bl != nil && el != nil {
			p99 = ratio(bl.P99, el.P99)
		}
		if k := latencyAt(rep.find(lab.ModeKernel, b.Scenario.Name, b.Scenario.Underlay), "50% of own NDR"); k != nil {
			if bl != nil {
				bk = ratio(bl.P99, k.P99)
			}
			if el != nil {
				ek = ratio(el.P99, k.P99)
			}
		}
		rows = append(rows, fmt.Sprintf("| %s | %sx | %sx | %sx | %sx | %sx |", b.Scenario.Name, ratio(b.NDR.Rate, e.NDR.Rate), ratio(b.PDR.Rate, e.PDR.Rate), p99, bk, ek))
	}
	if len(rows) == 0 {
		return ""
	}
	return "\nBusy polling (" + sideEgretBusyPoll + " over egret, same run; p99 at 50 % of the kernel's NDR, and each side's p99 there over the kernel's):\n\n" +
		"| scenario | NDR | PDR | p99 latency | egret-busy-poll/kernel p99 | egret/kernel p99 |\n|---|---|---|---|---|---|\n" +
		strings.Join(rows, "\n") + "\n"
}
