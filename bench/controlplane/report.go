package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/egret-gw/egret/bench/dist"
	"gonum.org/v1/plot/plotter"
)

// Result is everything one run measured; controlplane.json is this.
type Result struct {
	Scale   Scale   `json:"scale"`
	Machine Machine `json:"machine"`
	Setup   struct {
		TotalSeconds float64     `json:"total_s"`
		Steps        []SetupStep `json:"steps"`
	} `json:"setup"`
	Controller struct {
		// SyncedSeconds: from the process start until it led (informer
		// caches listed and synced).
		SyncedSeconds float64 `json:"synced_s"`
		// AllAssignedSeconds: from the process start until the watch showed
		// every object's status with all its egress IPs placed.
		AllAssignedSeconds float64 `json:"all_assigned_s"`
		// WriteSpanSeconds: from the first status the watch showed to the
		// last, the part of AllAssignedSeconds spent writing.
		WriteSpanSeconds float64 `json:"write_span_s"`
		PeakRSSMB        float64 `json:"peak_rss_mb"`
		RSSMB            float64 `json:"rss_mb"`
		HeapInuseMB      float64 `json:"heap_inuse_mb"`
		CPUSeconds       float64 `json:"cpu_s"`
	} `json:"controller"`
	Bare         BareResult   `json:"bare_client"`
	Convergence  []Point      `json:"convergence"`
	Change       dist.Summary `json:"change"`
	ChangeMillis []float64    `json:"change_ms"`
	Loss         dist.Summary `json:"node_loss"`
	Losses       []Loss       `json:"node_losses"`
	Steer        AgentResult  `json:"steer"`
	Gateway      AgentResult  `json:"gateway"`
	Targets      []Target     `json:"targets"`
}

// Machine says where the figures were taken.
type Machine struct {
	CPUs    int    `json:"cpus"`
	LoadAvg string `json:"loadavg_at_start"`
	LoadEnd string `json:"loadavg_at_end"`
	Go      string `json:"go"`
}

// SetupStep is one kind of object created before the measurement.
type SetupStep struct {
	What      string  `json:"what"`
	Count     int     `json:"count"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

// Loss is one node turned NotReady.
type Loss struct {
	Node   string  `json:"node"`
	IPs    int     `json:"ips"`
	Millis float64 `json:"ms"`
}

// AgentResult is one agent's configuration build.
type AgentResult struct {
	Node             string  `json:"node"`
	SyncSeconds      float64 `json:"sync_s"`                // list + watch of every kind until synced
	BuildSeconds     float64 `json:"build_s"`               // the configuration from the cached view
	BuildOnlySeconds float64 `json:"build_only_s,omitzero"` // gateway: Build without Settle
	Pods             int     `json:"pods"`                  // pods in the configuration (steer: pod rules)
	Objects          int     `json:"objects"`               // EgressIP objects in it
	Hosted           int     `json:"hosted,omitzero"`       // gateway: egress IPs hosted
	Problems         int     `json:"problems"`
}

// Target is one of the targets against the figure measured.
type Target struct {
	What   string  `json:"what"`
	Limit  float64 `json:"limit"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	Scaled bool    `json:"scaled"` // measured on a smaller cluster than the target's
}

func targets(r *Result) []Target {
	full := r.Scale.EgressIPs >= 10000 && r.Scale.Pods >= 100000 && r.Scale.Nodes >= 500
	t := []Target{
		{What: "every EgressIP assigned after controller start", Limit: 10, Value: r.Controller.AllAssignedSeconds, Unit: "s"},
		{What: "one change → its status written (p99)", Limit: 100, Value: r.Change.P99, Unit: "ms"},
		{What: "controller peak RSS", Limit: 500, Value: r.Controller.PeakRSSMB, Unit: "MB"},
	}
	for i := range t {
		t[i].Met = t[i].Value <= t[i].Limit
		t[i].Scaled = !full
	}
	return t
}

// thin keeps at most n points of the curve, always the first and last.
func thin(p []Point, n int) []Point {
	if len(p) <= n || n < 2 {
		return p
	}
	out := make([]Point, 0, n)
	for i := range n - 1 {
		out = append(out, p[i*(len(p)-1)/(n-1)])
	}
	return append(out, p[len(p)-1])
}

// write puts controlplane.json, controlplane.md and the plots into dir.
func write(dir string, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "controlplane.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the results: %w", err)
	}
	conv := make(plotter.XYs, 0, len(r.Convergence))
	for _, p := range r.Convergence {
		conv = append(conv, plotter.XY{X: p.T, Y: float64(p.Assigned)})
	}
	if err := dist.SavePNG(filepath.Join(dir, "controlplane-convergence.png"),
		fmt.Sprintf("EgressIPs assigned after the controller starts (%d objects, %d nodes, %d pods)", r.Scale.EgressIPs, r.Scale.Nodes, r.Scale.Pods),
		"seconds since the controller process started", "objects with every egress IP in status",
		dist.Series{Name: "assigned", XY: conv}); err != nil {
		return err
	}
	if err := dist.SavePNG(filepath.Join(dir, "controlplane-change-cdf.png"),
		"One EgressIP changed → its status written", "milliseconds", "fraction of changes",
		dist.CDF("change → status", r.ChangeMillis)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "controlplane.md"), []byte(markdown(r)), 0o644); err != nil {
		return fmt.Errorf("writing the report section: %w", err)
	}
	fmt.Printf("wrote controlplane.json, controlplane.md, controlplane-convergence.png and controlplane-change-cdf.png into %s\n", dir)
	return nil
}

// markdown is the part's section of docs/benchmarks.md.
func markdown(r *Result) string {
	var b strings.Builder
	s := r.Scale
	fmt.Fprintf(&b, "## Control plane at scale\n\n")
	fmt.Fprintf(&b, "A real kube-apiserver and etcd (objects only, no kubelet) with %d assignable Nodes, %d EgressIPs (one egress IP, ten pods each) and %d Pods on %d worker Nodes (%d on `%s`); `egret controller` runs as its own process (leader election off, reachability check off: a node is lost by turning NotReady), the agents' list+watch and configuration builds run in the benchmark's process. %d CPUs, load average %s at the start and %s at the end (1, 5, 15 minutes).\n\n",
		s.Nodes, s.EgressIPs, s.Pods, s.Workers, s.WorkerPods, workerName(0), r.Machine.CPUs, r.Machine.LoadAvg, r.Machine.LoadEnd)
	fmt.Fprintf(&b, "```\ngo run ./bench/controlplane -out DIR -scale %g    # make bench-controlplane\n```\n\n", float64(s.EgressIPs)/10000)
	fmt.Fprintf(&b, "| measure | figure | target |\n|---|---|---|\n")
	tgt := map[string]Target{}
	for _, t := range r.Targets {
		tgt[t.What] = t
	}
	mark := func(what string) string {
		t, ok := tgt[what]
		if !ok {
			return ""
		}
		v := "met"
		if !t.Met {
			v = "**missed**"
		}
		if t.Scaled {
			v += " (smaller cluster)"
		}
		return fmt.Sprintf("≤ %g %s: %s", t.Limit, t.Unit, v)
	}
	fmt.Fprintf(&b, "| controller start → caches synced | %.2f s | |\n", r.Controller.SyncedSeconds)
	fmt.Fprintf(&b, "| controller start → every status written | %.2f s | %s |\n", r.Controller.AllAssignedSeconds, mark("every EgressIP assigned after controller start"))
	bw := r.Bare
	fmt.Fprintf(&b, "| bare client-go, same API server: %d plain status updates (%d writers, QPS %g, burst %d) | %.2f s (%.0f/s) | |\n", bw.Writes, bw.Writers, bw.QPS, bw.Burst, bw.Seconds, bw.PerSecond)
	fmt.Fprintf(&b, "| controller/bare-client, every status written | %.2fx (first status to last: %.2f s, %.2fx) | |\n", bw.Ratio, r.Controller.WriteSpanSeconds, bw.WriteSpanRatio)
	fmt.Fprintf(&b, "| one change → its status written | p50 %.1f ms, p99 %.1f ms, max %.1f ms (n=%d) | %s |\n", r.Change.P50, r.Change.P99, r.Change.Max, r.Change.N, mark("one change → its status written (p99)"))
	ips := 0
	for _, l := range r.Losses {
		ips += l.IPs
	}
	fmt.Fprintf(&b, "| node NotReady → its egress IPs placed elsewhere | p50 %.0f ms, max %.0f ms (%d losses, %d IPs) | |\n", r.Loss.P50, r.Loss.Max, r.Loss.N, ips)
	fmt.Fprintf(&b, "| controller memory | peak RSS %.0f MB, heap in use %.0f MB | %s |\n", r.Controller.PeakRSSMB, r.Controller.HeapInuseMB, mark("controller peak RSS"))
	fmt.Fprintf(&b, "| controller CPU, start to the end of the timings | %.1f s | |\n", r.Controller.CPUSeconds)
	fmt.Fprintf(&b, "| steer agent (`%s`, %d pod rules): list+watch / desired state | %.2f s / %.0f ms | |\n", r.Steer.Node, r.Steer.Pods, r.Steer.SyncSeconds, r.Steer.BuildSeconds*1000)
	fmt.Fprintf(&b, "| gateway agent (`%s`, %d pods, %d egress IPs hosted): list+watch / build + settle | %.2f s / %.0f ms | |\n", r.Gateway.Node, r.Gateway.Pods, r.Gateway.Hosted, r.Gateway.SyncSeconds, r.Gateway.BuildSeconds*1000)
	fmt.Fprintf(&b, "\nSetup (concurrent creates, not measured against a target): %.0f s in all", r.Setup.TotalSeconds)
	for _, st := range r.Setup.Steps {
		fmt.Fprintf(&b, "; %d %s in %.1f s (%.0f/s)", st.Count, st.What, st.Seconds, st.PerSecond)
	}
	b.WriteString(".\n\n![convergence](bench/controlplane-convergence.png) ![one change](bench/controlplane-change-cdf.png)\n")
	return b.String()
}
