package steer

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the steer agent's Prometheus metrics (docs/metrics.md). The agent calls ObserveApply after
// every reconcile; the fail-closed drops are read from the kernel (the
// nftables counters) at scrape time. A nil *Metrics ignores every call.
type Metrics struct {
	rules, routes, selected prometheus.Gauge
	applies, applyErrors    prometheus.Counter
	problems                prometheus.Gauge
	lastDrops, lastTunnel   atomic.Uint64
}

// NewMetrics registers the steer metrics with reg. drops (nil: no series)
// returns the packets the fail-closed filter dropped; on error the last
// value read is reported.
func NewMetrics(reg prometheus.Registerer, drops func() (uint64, error)) *Metrics {
	s := &Metrics{
		rules: newGauge("egret_steer_rules",
			"Policy routing rules the agent has programmed (one per selected pod address and family)."),
		routes: newGauge("egret_steer_routes",
			"Routes the agent has programmed in its tables (towards the gateways)."),
		selected: newGauge("egret_steer_selected_pod_addresses",
			"Local pod addresses selected by an EgressIP: steered, and kept in by the fail-closed filter."),
		applies: newCounter("egret_steer_reconciles_total",
			"Reconcile passes (desired state computed and applied to the kernel)."),
		applyErrors: newCounter("egret_steer_apply_errors_total",
			"Reconcile passes whose kernel update failed (retried with backoff; the kernel keeps its last state)."),
		problems: newGauge("egret_steer_input_problems",
			"Input errors skipped by the last reconcile (invalid selector, gateway without VTEP...)."),
	}
	reg.MustRegister(s.rules, s.routes, s.selected, s.applies, s.applyErrors, s.problems)
	if drops != nil {
		reg.MustRegister(kernelCounter("egret_steer_fail_closed_drops_total",
			"Packets dropped by the fail-closed filter: from selected pods that would have left outside the tunnel, or from pod addresses the agent has not classified yet (nftables counters).",
			drops, &s.lastDrops))
	}
	return s
}

// RegisterTunnelDrops registers egret_steer_tunnel_drops_total with reg:
// drops returns the packets the tunnel rules dropped (Kernel.TunnelDrops);
// on error the last value read is reported.
func (s *Metrics) RegisterTunnelDrops(reg prometheus.Registerer, drops func() (uint64, error)) {
	if s == nil {
		return
	}
	reg.MustRegister(kernelCounter("egret_steer_tunnel_drops_total",
		"Packets dropped by the tunnel rules: frames of the tunnel's VNI from an address that is no known gateway VTEP, and pods' own VXLAN or Geneve to a gateway VTEP (nftables counters).",
		drops, &s.lastTunnel))
}

// kernelCounter reads a kernel counter at scrape time, keeping the last
// value read when the kernel cannot be read (a counter must not go back).
func kernelCounter(name, help string, read func() (uint64, error), last *atomic.Uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
		if n, err := read(); err == nil {
			last.Store(n)
		}
		return float64(last.Load())
	})
}

// ObserveApply records one reconcile: what the desired state holds and
// whether applying it failed.
func (s *Metrics) ObserveApply(rules, routes, selected, problems int, err error) {
	if s == nil {
		return
	}
	s.applies.Inc()
	if err != nil {
		s.applyErrors.Inc()
		return // the kernel keeps its last state: keep the gauges
	}
	s.rules.Set(float64(rules))
	s.routes.Set(float64(routes))
	s.selected.Set(float64(selected))
	s.problems.Set(float64(problems))
}

func newGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}
