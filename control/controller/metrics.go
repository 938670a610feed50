package controller

import (
	"sync/atomic"
	"time"
)

// Metrics counts what the controller does, for a later Prometheus
// collector; every field is safe to read at any time.
type Metrics struct {
	// AssignRuns counts assignment computations; AssignNanos is their total time.
	AssignRuns, AssignNanos atomic.Int64
	// AssignedIPs and UnassignedIPs are gauges after the last assignment:
	// egress IPs with a node, and valid owned IPs without one.
	AssignedIPs, UnassignedIPs atomic.Int64
	// Moves counts egress IPs that changed node; Failovers counts the moves
	// away from a node that was no longer usable (NotReady, unreachable,
	// cordoned with draining, unlabelled or deleted).
	Moves, Failovers atomic.Int64
	// StatusWrites, StatusConflicts and StatusErrors count status updates.
	StatusWrites, StatusConflicts, StatusErrors atomic.Int64
	// Events counts Events recorded.
	Events atomic.Int64
	// Probes and ProbeFailures count reachability checks; ProbeNanos is their
	// total duration and ProbeMaxNanos the longest.
	Probes, ProbeFailures, ProbeNanos, ProbeMaxNanos atomic.Int64
	// NodesUnreachable is a gauge of nodes failing the check now.
	NodesUnreachable atomic.Int64
}

func (m *Metrics) observeProbe(d time.Duration, failed bool) {
	m.Probes.Add(1)
	if failed {
		m.ProbeFailures.Add(1)
	}
	n := int64(d)
	m.ProbeNanos.Add(n)
	for {
		old := m.ProbeMaxNanos.Load()
		if n <= old || m.ProbeMaxNanos.CompareAndSwap(old, n) {
			return
		}
	}
}
