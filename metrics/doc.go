// Package metrics exposes Egret's Prometheus metrics: an HTTP server with
// /metrics, /healthz and /readyz for every role, the build-info gauge and
// the data-plane Collector (which reads the workers' published counters at
// scrape time, so the packet path only bumps plain per-worker counters).
// The controller's and the steer agent's metrics live with those roles
// (control/controller, control/steer); cmd/egret registers them here.
// docs/metrics.md lists every metric.
//
// The package reads its sources through small function fields, so it is
// tested without the gateway engine or the controller.
package metrics
