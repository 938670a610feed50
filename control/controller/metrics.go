package controller

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egret-gw/egret/control/identity"
)

// Metrics are the controller's Prometheus metrics (docs/metrics.md). The
// controller calls its methods as things happen (never on the packet path,
// so real histograms are fine). A nil *Metrics ignores every call, so the
// controller runs without metrics too.
type Metrics struct {
	assigned        *prometheus.GaugeVec
	unassigned      prometheus.Gauge
	noStandby       prometheus.Gauge
	assignSeconds   prometheus.Histogram
	moves           prometheus.Counter
	failovers       *prometheus.CounterVec
	probeSeconds    *prometheus.HistogramVec
	probeFailures   *prometheus.CounterVec
	reachable       *prometheus.GaugeVec
	heldDown        *prometheus.GaugeVec
	reconcileErrors *prometheus.CounterVec
	statusWrites    prometheus.Counter
	statusConflicts prometheus.Counter
	leader          prometheus.Gauge
	nodeCerts       *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := &Metrics{
		assigned: newGaugeVec("egret_controller_egress_ips_assigned",
			"Egress IPs assigned to the node by the last assignment.", "node"),
		unassigned: newGauge("egret_controller_egress_ips_unassigned",
			"Valid egress IPs that no node can host after the last assignment."),
		noStandby: newGauge("egret_controller_egress_ips_without_standby",
			"Assigned egress IPs that have no standby node after the last assignment: their connections break if their node fails."),
		assignSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egret_controller_assignment_duration_seconds",
			Help:    "Time to compute an assignment of egress IPs to nodes.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), // 50 µs .. 13 s
		}),
		moves: newCounter("egret_controller_egress_ip_moves_total",
			"Egress IPs that changed node, for any reason."),
		failovers: newCounterVec("egret_controller_failovers_total",
			"Egress IPs moved away from a node that was no longer usable, by the node they left.", "node"),
		probeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "egret_controller_probe_duration_seconds",
			Help:    "Reachability probe round trips to gateway nodes (failed probes count their time spent).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 3, 10), // 100 µs .. 2 s
		}, []string{"node"}),
		probeFailures: newCounterVec("egret_controller_probe_failures_total",
			"Reachability probes that failed, by node.", "node"),
		reachable: newGaugeVec("egret_controller_node_reachable",
			"1 if the egress-assignable node passes the reachability check, 0 if not.", "node"),
		heldDown: newGaugeVec("egret_controller_node_held_down",
			"1 while the egress-assignable node, usable again after a failure, is held down and gets no new egress IPs, else 0.", "node"),
		reconcileErrors: newCounterVec("egret_controller_reconcile_errors_total",
			"Reconcile attempts that failed, by what was being done ("+strings.Join(ReconcileKinds, ", ")+").", "kind"),
		statusWrites: newCounter("egret_controller_status_writes_total",
			"EgressIP status updates written."),
		statusConflicts: newCounter("egret_controller_status_conflicts_total",
			"EgressIP status updates that met a conflict and were retried."),
		leader: newGauge("egret_controller_leader",
			"1 while this replica holds the leader lease, else 0."),
		nodeCerts: newCounterVec("egret_controller_node_certificates_total",
			"Gateway node certificate requests (CSRs of signer egret.io/gateway) decided by this replica: issued or denied.", "result"),
	}
	reg.MustRegister(c.assigned, c.unassigned, c.noStandby, c.assignSeconds, c.moves, c.failovers, c.probeSeconds,
		c.probeFailures, c.reachable, c.heldDown, c.reconcileErrors, c.statusWrites, c.statusConflicts, c.leader, c.nodeCerts)
	// Present from the start so dashboards and alerts see 0, not "no data".
	for _, k := range ReconcileKinds {
		c.reconcileErrors.WithLabelValues(k)
	}
	for _, r := range []string{identity.ResultIssued, identity.ResultDenied} {
		c.nodeCerts.WithLabelValues(r)
	}
	return c
}

// NodeCertificate counts a gateway CSR decided by the signer: result is
// identity.ResultIssued or identity.ResultDenied.
func (c *Metrics) NodeCertificate(result string) {
	if c == nil {
		return
	}
	c.nodeCerts.WithLabelValues(result).Inc()
}

// ReconcileKinds are the kind label values of reconcile errors.
var ReconcileKinds = []string{"assign", "status", "event", "node"}

// ObserveAssignment records one assignment computation: how long it took,
// how many IPs each node now hosts (nodes absent from perNode host none and
// their series is removed), which of them are held down, how many valid IPs
// have no node and how many assigned ones have no standby. Each node in
// perNode also gets its failover counter, at 0 until it fails.
func (c *Metrics) ObserveAssignment(d time.Duration, perNode map[string]int, heldDown map[string]bool, unassigned, noStandby int) {
	if c == nil {
		return
	}
	c.assignSeconds.Observe(d.Seconds())
	c.assigned.Reset()
	c.heldDown.Reset()
	for n, k := range perNode {
		c.assigned.WithLabelValues(n).Set(float64(k))
		c.heldDown.WithLabelValues(n).Set(b2f(heldDown[n]))
		// A node's failover counter exists at 0 from its first assignment:
		// increase() over a series that appears at 1 shows nothing.
		c.failovers.WithLabelValues(n)
	}
	c.unassigned.Set(float64(unassigned))
	c.noStandby.Set(float64(noStandby))
}

// Moved records an egress IP that left node from; failover says the node
// was no longer usable (NotReady, unreachable, unlabelled, deleted).
func (c *Metrics) Moved(from string, failover bool) {
	if c == nil {
		return
	}
	c.moves.Inc()
	if failover {
		c.failovers.WithLabelValues(from).Inc()
	}
}

// ObserveProbe records a reachability probe of node.
func (c *Metrics) ObserveProbe(node string, d time.Duration, failed bool) {
	if c == nil {
		return
	}
	c.probeSeconds.WithLabelValues(node).Observe(d.Seconds())
	f := c.probeFailures.WithLabelValues(node)
	if failed {
		f.Inc()
	}
}

// SetReachable records the reachability verdict of node.
func (c *Metrics) SetReachable(node string, ok bool) {
	if c == nil {
		return
	}
	c.reachable.WithLabelValues(node).Set(b2f(ok))
}

// ForgetNode removes a deleted node's per-node series.
func (c *Metrics) ForgetNode(node string) {
	if c == nil {
		return
	}
	c.reachable.DeleteLabelValues(node)
	c.probeSeconds.DeleteLabelValues(node)
	c.probeFailures.DeleteLabelValues(node)
	c.assigned.DeleteLabelValues(node)
	c.heldDown.DeleteLabelValues(node)
}

// ReconcileError counts a failed reconcile step of the given kind (one of ReconcileKinds).
func (c *Metrics) ReconcileError(kind string) {
	if c == nil {
		return
	}
	c.reconcileErrors.WithLabelValues(kind).Inc()
}

// StatusWritten counts a status update; conflict says it hit a conflict.
func (c *Metrics) StatusWritten(conflict bool) {
	if c == nil {
		return
	}
	if conflict {
		c.statusConflicts.Inc()
		return
	}
	c.statusWrites.Inc()
}

// SetLeader records whether this replica leads.
func (c *Metrics) SetLeader(ok bool) {
	if c == nil {
		return
	}
	c.leader.Set(b2f(ok))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The plain metric constructors: name and help, plus labels for a vector.

func newGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func newGaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func newCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}
