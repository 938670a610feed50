package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/egret-gw/egret/bench/dist"
)

// Result is what one run measured; failover.json is this.
type Result struct {
	Machine             Machine `json:"machine"`
	ReachabilitySeconds int     `json:"reachability_timeout_s"`
	Seconds             float64 `json:"seconds"`
	Kills               []Kill  `json:"kills"`
	// Status, NewConn and OldConn summarise the kills (OldConn: one value
	// per connection that went through a killed gateway).
	Status    Percentiles `json:"status_moved"`
	NewConn   Percentiles `json:"first_packet_new_conn"`
	OldConn   Percentiles `json:"first_packet_old_conn"`
	OldBroken int         `json:"old_conns_broken"`
}

// Machine says where the figures were taken.
type Machine struct {
	CPUs    int    `json:"cpus"`
	LoadAvg string `json:"loadavg_at_start"`
	LoadEnd string `json:"loadavg_at_end"`
}

// Percentiles of a sample in milliseconds (nearest rank).
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return Percentiles{N: len(s), P50: dist.Percentile(s, 50), P99: dist.Percentile(s, 99), Max: s[len(s)-1]}
}

func (r *Result) samples() (status, newConn, oldConn []float64) {
	for _, k := range r.Kills {
		status = append(status, k.StatusMs)
		newConn = append(newConn, k.NewConnMs)
		oldConn = append(oldConn, k.OldConnMs...)
	}
	return status, newConn, oldConn
}

func (r *Result) summarize() {
	s, n, o := r.samples()
	r.Status, r.NewConn, r.OldConn = percentiles(s), percentiles(n), percentiles(o)
	r.OldBroken = 0
	for _, k := range r.Kills {
		r.OldBroken += k.OldBroken
	}
}

// write puts failover.json, failover.md and failover-cdf.png into dir.
func write(dir string, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "failover.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the results: %w", err)
	}
	s, n, o := r.samples()
	if err := dist.SavePNG(filepath.Join(dir, "failover-cdf.png"),
		fmt.Sprintf("Gateway killed (%d kills, reachability timeout %d s)", len(r.Kills), r.ReachabilitySeconds),
		"milliseconds after the kill", "fraction",
		dist.CDF("status moved", s), dist.CDF("first packet, new connection", n), dist.CDF("first packet, old connection", o)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "failover.md"), []byte(markdown(r)), 0o644); err != nil {
		return fmt.Errorf("writing the report section: %w", err)
	}
	fmt.Printf("\n%s\nwrote failover.json, failover.md and failover-cdf.png into %s\n", markdown(r), dir)
	return nil
}

// markdown is the part's section of docs/benchmarks.md.
func markdown(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Failover distribution\n\n")
	fmt.Fprintf(&b, "The managed lab (real controller, gateway and steer agents; reachability timeout %d s): the `egret gateway` of a gateway hosting egress IPs killed with SIGKILL %d times, the gateways in turn, each started again and its hold-down waited out before the next kill. Old connections are long-lived HTTP connections that left through the killed gateway, asking again 10 ms after each answer; their first answer once the killed process is gone waits for TCP's retransmission timer. %d CPUs, load average %s at the start and %s at the end (1, 5, 15 minutes).\n\n",
		r.ReachabilitySeconds, len(r.Kills), r.Machine.CPUs, r.Machine.LoadAvg, r.Machine.LoadEnd)
	b.WriteString("```\ngo run ./bench/failover -out DIR -kills 20    # make bench-failover (root)\n```\n\n")
	b.WriteString("| after the kill | p50 | p99 | max | n |\n|---|---|---|---|---|\n")
	row := func(what string, p Percentiles) {
		fmt.Fprintf(&b, "| %s | %.0f ms | %.0f ms | %.0f ms | %d |\n", what, p.P50, p.P99, p.Max, p.N)
	}
	row("status moved (every egress IP of the killed gateway placed elsewhere)", r.Status)
	row("first packet through the new gateway, new connection", r.NewConn)
	row("first packet through the new gateway, old connection", r.OldConn)
	fmt.Fprintf(&b, "\nOld connections broken (reset, or no answer within the wait): %d. Target (issue 15): ≤ 1 s with the default 1 s reachability timeout, zero resets.\n\n", r.OldBroken)
	b.WriteString("![failover CDF](bench/failover-cdf.png)\n")
	return b.String()
}
