package main

import (
	"fmt"
	"slices"
)

// Repetitions (issue 34, item 3): one pass of the harness cannot resolve a
// few per cent (the side that ran first lost 25–55 % whichever it was), so
// the sides of a lab run interleaved, A B A B …, each -reps times, and a
// figure is the median of its repetitions with their spread beside it.

// step is one lab of an interleaved run: side Side's repetition Rep.
type step struct {
	Rep  int
	Side string
}

// schedule is the running order of sides over reps repetitions: every
// side once per round, the rounds one after the other, so that drift in
// the machine's load falls on all sides alike.
func schedule(sides []string, reps int) []step {
	var out []step
	for r := range max(reps, 1) {
		for _, s := range sides {
			out = append(out, step{Rep: r, Side: s})
		}
	}
	return out
}

// spread is one figure over the repetitions: the median (for an even
// count, the lower of the two middle values, a rate a trial passed), the
// lowest and the highest.
type spread struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

func newSpread(vals []float64) spread {
	if len(vals) == 0 {
		return spread{}
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	return spread{Median: s[(len(s)-1)/2], Min: s[0], Max: s[len(s)-1], Values: vals}
}

// String is the median, with the range when there was more than one value.
func (s spread) String() string {
	if len(s.Values) < 2 {
		return fmt.Sprintf("%.0f", s.Median)
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", s.Median, s.Min, s.Max)
}

// ceilingMargin is how far above a measured rate the generator's ceiling
// must be for the rate to be the gateway's: within it the generator may be
// what bounded it (issue 34: 2× the kernel's NDR sat at 76–89 % of it).
const ceilingMargin = 1.5

// generatorClose reports whether the generator's ceiling is below
// ceilingMargin times rate.
func generatorClose(ceiling, rate float64) bool {
	return rate > 0 && ceiling < ceilingMargin*rate
}

// median returns the run of runs whose key is the median (lower middle).
func median(runs []*result, key func(*result) float64) *result {
	s := slices.Clone(runs)
	slices.SortStableFunc(s, func(a, b *result) int {
		switch ka, kb := key(a), key(b); {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	return s[(len(s)-1)/2]
}

// aggregate folds each side's repetitions of a scenario into one result, in
// the order the first repetitions ran: NDR and its trial from the
// repetition with the median NDR, PDR from the one with the median PDR,
// the generator's ceiling and each latency percentile the median of the
// repetitions', and every figure's spread beside it.
func aggregate(runs []*result) []*result {
	type key struct{ mode, name, underlay string }
	var order []key
	groups := map[key][]*result{}
	for _, r := range runs {
		k := key{r.Mode, r.Scenario.Name, r.Scenario.Underlay}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []*result
	for _, k := range order {
		g := groups[k]
		m := median(g, func(r *result) float64 { return r.NDR.Rate })
		agg := *m
		agg.PDR = median(g, func(r *result) float64 { return r.PDR.Rate }).PDR
		var ndr, pdr, ns, ceil []float64
		for _, r := range g {
			ndr, pdr = append(ndr, r.NDR.Rate), append(pdr, r.PDR.Rate)
			ns, ceil = append(ns, r.NDR.Trial.TaskNsPerPacket), append(ceil, r.GeneratorPPS)
		}
		agg.NDRSpread, agg.PDRSpread, agg.NsSpread = newSpread(ndr), newSpread(pdr), newSpread(ns)
		agg.GeneratorPPS = newSpread(ceil).Median
		agg.NDRGeneratorClose = generatorClose(agg.GeneratorPPS, agg.NDR.Rate)
		agg.PDRGeneratorClose = generatorClose(agg.GeneratorPPS, agg.PDR.Rate)
		agg.Latency = medianLatency(g, m)
		if len(g) > 1 {
			agg.Reps = g
		}
		out = append(out, &agg)
	}
	return out
}

// medianLatency is, per load of m's latency trials, each percentile's
// median over the repetitions that measured that load; the CDF is m's.
func medianLatency(g []*result, m *result) []latency {
	var out []latency
	for _, l := range m.Latency {
		var pps, loss, p50, p90, p99, p999 []float64
		for _, r := range g {
			if o := latencyAt(r, l.Load); o != nil {
				pps, loss = append(pps, o.PPS), append(loss, o.Loss)
				p50, p90, p99, p999 = append(p50, o.P50), append(p90, o.P90), append(p99, o.P99), append(p999, o.P999)
			}
		}
		med := l
		med.PPS, med.Loss = newSpread(pps).Median, newSpread(loss).Median
		med.P50, med.P90, med.P99, med.P999 = newSpread(p50).Median, newSpread(p90).Median, newSpread(p99).Median, newSpread(p999).Median
		med.P99Spread = newSpread(p99)
		out = append(out, med)
	}
	return out
}
