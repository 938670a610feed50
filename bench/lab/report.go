package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/egret-gw/egret/lab"
)

// part is this program's name in the report folder: dataplane.json,
// dataplane.md, dataplane-*.png.
const part = "dataplane"

// report is dataplane.json.
type report struct {
	Started   time.Time `json:"started"`
	Trial     string    `json:"trial"`
	Load      string    `json:"loadavg_before"`
	LoadAfter string    `json:"loadavg_after"`
	GenCPU    int       `json:"generator_core"`
	GwCPU     int       `json:"gateway_core"`
	CPUNote   string    `json:"cpu_accounting"`
	Reps      int       `json:"repetitions"`
	// Results are the repetitions of each side's scenario folded into one
	// (aggregate); runs are the repetitions as they ran.
	Results []*result `json:"results"`
	runs    []*result
	// Bulk are the bulk TCP scenarios' results (bulk.go).
	Bulk    []*bulkResult `json:"bulk,omitempty"`
	Summary string        `json:"summary"`
}

// result is one scenario on one side.
type result struct {
	Scenario     scenario     `json:"scenario"`
	Mode         string       `json:"mode"`
	Rep          int          `json:"rep"` // which repetition (0-based); an aggregate has its median NDR's
	Setup        string       `json:"setup"`
	GeneratorPPS float64      `json:"generator_ceiling_pps"`
	NDR          searchResult `json:"ndr"`
	PDR          searchResult `json:"pdr"`
	Latency      []latency    `json:"latency,omitempty"`
	// Sync is, on the sync-on side, what the flow sync did meanwhile.
	Sync *syncStats `json:"sync,omitempty"`
	// NATLog is, on the natlog-on side, what the NAT log did meanwhile.
	NATLog *natlogStats `json:"natlog,omitempty"`
	// The spreads of NDR, PDR and the gateway's CPU per packet at the NDR
	// over the repetitions, and whether the generator's ceiling was
	// below ceilingMargin times the NDR or the PDR (aggregate).
	NDRSpread         spread `json:"ndr_pps_reps"`
	PDRSpread         spread `json:"pdr_pps_reps"`
	NsSpread          spread `json:"gateway_ns_per_packet_at_ndr_reps"`
	NDRGeneratorClose bool   `json:"ndr_generator_close,omitempty"`
	PDRGeneratorClose bool   `json:"pdr_generator_close,omitempty"`
	// Reps are the repetitions folded into this result (more than one).
	Reps []*result `json:"reps,omitempty"`
}

// latency is one trial's latency percentiles, in µs.
type latency struct {
	Load string  `json:"load"`
	PPS  float64 `json:"pps"`
	Loss float64 `json:"loss"`
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p99_9_us"`
	// P99Spread is p99 over the repetitions (aggregate).
	P99Spread spread `json:"p99_us_reps"`
	// CDF is (µs, fraction) for the plot.
	CDF [][2]float64 `json:"cdf,omitempty"`
}

func newLatency(load string, t trial) latency {
	l := latency{Load: load, PPS: t.Offered(), Loss: t.Loss(),
		P50: t.Latency.quantile(0.5) / 1e3, P90: t.Latency.quantile(0.9) / 1e3,
		P99: t.Latency.quantile(0.99) / 1e3, P999: t.Latency.quantile(0.999) / 1e3}
	xs, ys := t.Latency.cdf()
	for i := range xs {
		l.CDF = append(l.CDF, [2]float64{xs[i], ys[i]})
	}
	return l
}

func (rep *report) find(mode, name, underlay string) *result {
	for _, r := range rep.Results {
		if r.Mode == mode && r.Scenario.Name == name && r.Scenario.Underlay == underlay {
			return r
		}
	}
	return nil
}

// findRun is repetition i of a side's scenario as it ran.
func (rep *report) findRun(mode, name, underlay string, i int) *result {
	for _, r := range rep.runs {
		if r.Mode == mode && r.Scenario.Name == name && r.Scenario.Underlay == underlay && r.Rep == i {
			return r
		}
	}
	return nil
}

func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func latencyAt(r *result, load string) *latency {
	if r == nil {
		return nil
	}
	for i := range r.Latency {
		if r.Latency[i].Load == load {
			return &r.Latency[i]
		}
	}
	return nil
}

// summary is the last two lines: 64-byte frames, 10k flows, one gateway
// core; p99 latency of both sides at half the kernel's NDR; then Egret
// against the AF_XDP reflector, the ceiling of its kind of gateway here.
func (rep *report) summary() string {
	k, e := rep.find(lab.ModeKernel, "est-10k", lab.UnderlayIPv4), rep.find(lab.ModeEgret, "est-10k", lab.UnderlayIPv4)
	kc, ec := rep.find(lab.ModeKernel, "cps", lab.UnderlayIPv4), rep.find(lab.ModeEgret, "cps", lab.UnderlayIPv4)
	ndr, pdr, cps, p99 := "n/a", "n/a", "n/a", "n/a"
	if k != nil && e != nil {
		ndr, pdr = ratio(e.NDR.Rate, k.NDR.Rate), ratio(e.PDR.Rate, k.PDR.Rate)
		if kl, el := latencyAt(k, "50% of own NDR"), latencyAt(e, "50% of kernel NDR"); kl != nil && el != nil {
			p99 = ratio(el.P99, kl.P99)
		}
	}
	if kc != nil && ec != nil {
		cps = ratio(ec.NDR.Rate, kc.NDR.Rate)
	}
	line := fmt.Sprintf("egret/kernel: NDR %sx, PDR %sx, CPS %sx, p99 latency %sx", ndr, pdr, cps, p99)
	// The ceiling: Egret against the least an AF_XDP gateway can do here.
	andr, apdr := "n/a", "n/a"
	if a := rep.find(sideAFXDPReflector, "est-10k", lab.UnderlayIPv4); a != nil && e != nil {
		andr, apdr = ratio(e.NDR.Rate, a.NDR.Rate), ratio(e.PDR.Rate, a.PDR.Rate)
	}
	return line + fmt.Sprintf("\negret/afxdp-reflector: NDR %sx, PDR %sx", andr, apdr)
}

// tables is the markdown both the terminal and dataplane.md show.
func (rep *report) tables() string {
	if len(rep.Results) == 0 { // a run of the bulk scenarios alone
		return rep.bulkTable()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Each figure is the median of %d repetition(s), the sides interleaved, with the range in brackets; an NDR counts only when a second full-length trial at its rate passed too. "+
		"† marks a rate within %.1f× of the generator's ceiling (the generator may have bounded it).\n\n", max(rep.Reps, 1), ceilingMargin)
	b.WriteString("| scenario | side | NDR pps | PDR pps | gateway ns/packet at NDR | gateway cores at NDR | generator ceiling pps | egret/kernel NDR | egret/kernel PDR |\n|---|---|---|---|---|---|---|---|---|\n")
	dagger := func(close bool) string {
		if close {
			return " †"
		}
		return ""
	}
	for _, r := range rep.Results {
		lim := dagger(r.NDRGeneratorClose)
		if r.NDR.Limited {
			lim += " (generator)"
		}
		kr := ""
		kp := ""
		if r.Mode == lab.ModeEgret {
			if k := rep.find(lab.ModeKernel, r.Scenario.Name, r.Scenario.Underlay); k != nil {
				kr, kp = ratio(r.NDR.Rate, k.NDR.Rate)+"x", ratio(r.PDR.Rate, k.PDR.Rate)+"x"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s%s | %s%s | %s | %.2f | %.0f | %s | %s |\n", r.Scenario.Name, r.Mode, orRate(r.NDRSpread, r.NDR.Rate), lim,
			orRate(r.PDRSpread, r.PDR.Rate), dagger(r.PDRGeneratorClose), orRate(r.NsSpread, r.NDR.Trial.TaskNsPerPacket), r.NDR.Trial.TaskCores, r.GeneratorPPS, kr, kp)
	}
	b.WriteString(rep.ceiling())
	b.WriteString(rep.scaling())
	b.WriteString(rep.syncCost())
	b.WriteString(rep.natlogCost())
	b.WriteString(rep.bulkTable())
	b.WriteString(rep.busyPollCost())
	b.WriteString("\n| scenario | side | load | pps | p50 µs | p90 µs | p99 µs | p99.9 µs | loss |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		for _, l := range r.Latency {
			p99 := fmt.Sprintf("%.1f", l.P99)
			if s := l.P99Spread; len(s.Values) > 1 {
				p99 += fmt.Sprintf(" (%.1f–%.1f)", s.Min, s.Max)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.1f | %.1f | %s | %.1f | %.1e |\n", r.Scenario.Name, r.Mode, l.Load, l.PPS, l.P50, l.P90, p99, l.P999, l.Loss)
		}
	}
	return b.String()
}

// ceiling is the table of each side against the reflectors, the least a
// gateway of each kind can do on this path, per scenario both ran.
func (rep *report) ceiling() string {
	var b strings.Builder
	for _, r := range rep.Results {
		if r.Mode != sideAFXDPReflector && r.Mode != sideXDPReflector {
			continue
		}
		for _, m := range []string{lab.ModeEgret, lab.ModeKernel} {
			o := rep.find(m, r.Scenario.Name, r.Scenario.Underlay)
			if o == nil {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("\nAgainst the ceiling (a side's NDR and PDR over a reflector's, same run):\n\n| scenario | side / reflector | NDR | PDR |\n|---|---|---|---|\n")
			}
			fmt.Fprintf(&b, "| %s | %s/%s | %sx | %sx |\n", r.Scenario.Name, m, r.Mode, ratio(o.NDR.Rate, r.NDR.Rate), ratio(o.PDR.Rate, r.PDR.Rate))
		}
	}
	return b.String()
}

// scaling is the line comparing two gateway queues with one (est-10k-2q
// against est-10k, each side against itself), when the run has both.
func (rep *report) scaling() string {
	var parts []string
	for _, m := range []string{lab.ModeKernel, lab.ModeEgret} {
		one, two := rep.find(m, "est-10k", lab.UnderlayIPv4), rep.find(m, "est-10k-2q", lab.UnderlayIPv4)
		if one != nil && two != nil {
			parts = append(parts, fmt.Sprintf("%s NDR %sx, PDR %sx", m, ratio(two.NDR.Rate, one.NDR.Rate), ratio(two.PDR.Rate, one.PDR.Rate)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "\nTwo gateway queues against one (est-10k-2q / est-10k): " + strings.Join(parts, "; ") + ".\n"
}

// syncCost is the table of what the flow sync costs the gateway, sync-on
// over sync-off per scenario, when the run has both sides.
func (rep *report) syncCost() string {
	return rep.costTable(sideSyncOff, sideSyncOn, "\nThe flow sync's cost: the gateway agent with its flows synced to the egress IP's standby ("+sideSyncOn+
		") over the same agent without the sync ("+sideSyncOff+"), each on a managed lab of its own:\n\n",
		[]string{"records sent during the scenario", "flows on the primary / backup flows on the standby at its end", "full resyncs, stalls"},
		func(on *result) []string {
			if s := on.Sync; s != nil {
				return []string{fmt.Sprint(s.RecordsSent), fmt.Sprintf("%d / %d", s.PrimaryFlows, s.StandbyBackupFlows), fmt.Sprintf("%d, %d", s.FullResyncs, s.Stalls)}
			}
			return nil
		})
}

// costTable is the table of what a feature costs the gateway: side on over
// side off per scenario, for each scenario both sides ran ("" when none
// did). intro heads it; after the ratios come the feature's own columns,
// named by cols and filled by cells from the on side (nil: left empty, the
// side measured nothing).
func (rep *report) costTable(off, on, intro string, cols []string, cells func(on *result) []string) string {
	var b strings.Builder
	for _, r := range rep.Results {
		o := rep.find(off, r.Scenario.Name, r.Scenario.Underlay)
		if r.Mode != on || o == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString(intro)
			head := append([]string{"scenario", "NDR on/off", "PDR on/off", "gateway ns/packet at NDR on/off"}, cols...)
			b.WriteString("| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(head)) + "\n")
		}
		own := cells(r)
		if own == nil {
			own = make([]string, len(cols))
		}
		fmt.Fprintf(&b, "| %s | %sx | %sx | %sx | %s |\n", r.Scenario.Name, ratio(r.NDR.Rate, o.NDR.Rate), ratio(r.PDR.Rate, o.PDR.Rate),
			ratio(r.NDR.Trial.TaskNsPerPacket, o.NDR.Trial.TaskNsPerPacket), strings.Join(own, " | "))
	}
	return b.String()
}

// orRate is s as a table cell, or v when s holds nothing (a result that
// was not aggregated).
func orRate(s spread, v float64) string {
	if len(s.Values) == 0 {
		return fmt.Sprintf("%.0f", v)
	}
	return s.String()
}

func (rep *report) print(w io.Writer) {
	rep.Summary = rep.summary()
	fmt.Fprintf(w, "\n%s\nmachine load (1/5/15 min) before %s, after %s\n\n%s\n", rep.tables(), rep.Load, rep.LoadAfter, rep.Summary)
}

// write puts dataplane.json, dataplane.md and the plots into dir.
func (rep *report) write(dir string) error {
	rep.CPUNote = cpuNote
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, part+".json"), js, 0o644); err != nil {
		return err
	}
	pngs, err := rep.plots(dir)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### Data plane through one gateway (`make bench-lab`)\n\nRun of %s UTC, trials of %s, machine load (1/5/15 min) %s before and %s after.\n\n",
		rep.Started.Format("2006-01-02 15:04"), rep.Trial, rep.Load, rep.LoadAfter)
	fmt.Fprintf(&b, "```\n%s\n```\n\n", rep.Summary)
	b.WriteString(rep.tables())
	b.WriteString("\nScenarios:\n\n")
	seen := map[string]bool{}
	for _, r := range rep.Results {
		if !seen[r.Scenario.Name] {
			seen[r.Scenario.Name] = true
			fmt.Fprintf(&b, "- `%s`: %s\n", r.Scenario.Name, r.Scenario.About)
		}
	}
	fmt.Fprintf(&b, "\n%s\n\n", cpuNote)
	for _, p := range pngs {
		fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
	}
	return os.WriteFile(filepath.Join(dir, part+".md"), []byte(b.String()), 0o644)
}

// plots draws NDR/PDR per scenario and the latency CDFs; it returns the
// file names written.
func (rep *report) plots(dir string) ([]string, error) {
	var names []string
	// NDR and PDR per scenario, both sides.
	var scen []string
	for _, r := range rep.Results {
		if r.Mode == lab.ModeKernel {
			scen = append(scen, r.Scenario.Name+"/"+r.Scenario.Underlay)
		}
	}
	if len(scen) > 0 {
		p := plot.New()
		p.Title.Text = "Throughput through one gateway core (64-byte frames unless named)"
		p.Y.Label.Text = "kpps"
		w := vg.Points(12)
		series := []struct{ mode, crit string }{{lab.ModeKernel, "NDR"}, {lab.ModeKernel, "PDR"}, {lab.ModeEgret, "NDR"}, {lab.ModeEgret, "PDR"}}
		for i, s := range series {
			vals := make(plotter.Values, len(scen))
			for j, sc := range scen {
				name, u, _ := strings.Cut(sc, "/")
				if r := rep.find(s.mode, name, u); r != nil {
					if s.crit == "NDR" {
						vals[j] = r.NDR.Rate / 1e3
					} else {
						vals[j] = r.PDR.Rate / 1e3
					}
				}
			}
			bars, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return nil, err
			}
			bars.Color = plotutil.Color(i)
			bars.LineStyle.Width = 0
			bars.Offset = w * vg.Length(float64(i)-1.5)
			p.Add(bars)
			p.Legend.Add(s.mode+" "+s.crit, bars)
		}
		labels := make([]string, len(scen))
		for j, sc := range scen {
			labels[j] = strings.TrimSuffix(sc, "/"+lab.UnderlayIPv4)
		}
		p.NominalX(labels...)
		p.Legend.Top = true
		name := part + "-throughput.png"
		if err := p.Save(9*vg.Inch, 4*vg.Inch, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	// Latency CDFs of est-10k.
	p := plot.New()
	p.Title.Text = "Latency CDF, 10k flows, 64-byte frames"
	p.X.Label.Text = "µs (log)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "fraction of frames ≤"
	i := 0
	for _, r := range rep.Results {
		if r.Scenario.Name != "est-10k" {
			continue
		}
		for _, l := range r.Latency {
			var xy plotter.XYs
			for _, c := range l.CDF {
				if c[0] > 0 {
					xy = append(xy, plotter.XY{X: c[0], Y: c[1]})
				}
			}
			if len(xy) == 0 {
				continue
			}
			line, err := plotter.NewLine(xy)
			if err != nil {
				return nil, err
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			i++
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s %s (%.0f kpps)", r.Mode, l.Load, l.PPS/1e3), line)
		}
	}
	if i > 0 {
		p.Legend.Left, p.Legend.Top = true, true
		name := part + "-latency.png"
		if err := p.Save(9*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}
