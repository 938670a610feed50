package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/egret-gw/egret/gateway/natlog"
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
	// WriterNs is the CPU time the writer's thread (on the generator's
	// core, see placeWriter) spent meanwhile, in ns; WriterNsPerRecord
	// that over the records written.
	WriterNs          uint64  `json:"writer_cpu_ns"`
	WriterNsPerRecord float64 `json:"writer_cpu_ns_per_record"`
}

// placeWriter moves the NAT log writer's thread of each of pids (found by
// its name, natlog.ThreadName) to the generator's core, after pinProcess
// put it with the workers. On a real node the writer runs on a core the
// workers do not use (docs/natlog.md); on two cores the generator's is the
// only other one. It runs there SCHED_FIFO below the generator and the
// receiver (prioWriter), so it cannot delay what they measure and gets
// the time they leave (they sleep between batches). Not at the default
// class, where the shared machine's other work delays it by milliseconds:
// the one run tried so showed the gateway's NDR at a tenth of the log-off
// side's, its socket's receive ring overflowing while the gateway's core
// idled (cause not established; a stop-the-world, which waits for every
// thread running Go code, would do it). It returns the writers' thread ids.
func placeWriter(pids []int, cpu int) ([]int, error) {
	var tids []int
	for _, pid := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue // a NAPI thread that is gone, or not a process of ours
		}
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", t.Name(), "comm"))
			if err != nil || strings.TrimSpace(string(b)) != natlog.ThreadName {
				continue
			}
			tid, _ := strconv.Atoi(t.Name())
			if err := setAffinity(tid, []int{cpu}, prioWriter); err != nil {
				return nil, fmt.Errorf("the NAT log writer: %w", err)
			}
			tids = append(tids, tid)
		}
	}
	if len(tids) == 0 {
		return nil, fmt.Errorf("no thread named %s in %v: the gateway runs no NAT log writer", natlog.ThreadName, pids)
	}
	return tids, nil
}

// threadCPU is the CPU time of threads tids (of any process), in ns, from
// their schedstat (nanoseconds, not the 10 ms ticks of stat).
func threadCPU(tids []int) uint64 {
	var sum uint64
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", tid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseUint(f[0], 10, 64)
			sum += n
		}
	}
	return sum
}

// measureNATLog runs fn (a scenario on the natlog-on side) and returns
// what gateway gw's NAT log, written by threads writers, did meanwhile.
func measureNATLog(spec *lab.Spec, gw string, writers []int, fn func() error) (*natlogStats, error) {
	cpu0 := threadCPU(writers)
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
	st := &natlogStats{Written: d("egret_natlog_records_written_total"), Dropped: d("egret_natlog_records_dropped_total"),
		Failed: d("egret_natlog_records_failed_total"), FlowsNew: d("egret_gateway_flows_created_total"),
		WriterNs: threadCPU(writers) - cpu0}
	if st.Written > 0 {
		st.WriterNsPerRecord = float64(st.WriterNs) / float64(st.Written)
	}
	return st, nil
}

// natlogCost is the table of what the NAT log costs the gateway, natlog-on
// over natlog-off per scenario, when the run has both sides.
func (rep *report) natlogCost() string {
	return rep.costTable(sideNATLogOff, sideNATLogOn, "\nThe NAT log's cost: the gateway agent logging every binding ("+sideNATLogOn+
		") over the same agent without the log ("+sideNATLogOff+"), each on a managed lab of its own, no flow sync:\n\n",
		[]string{"records written / lost (full ring) during the scenario", "flows made", "writer CPU ns/record (generator's core)"},
		func(on *result) []string {
			if s := on.NATLog; s != nil {
				return []string{fmt.Sprintf("%d / %d", s.Written, s.Dropped), fmt.Sprint(s.FlowsNew), fmt.Sprintf("%.0f", s.WriterNsPerRecord)}
			}
			return nil
		})
}
