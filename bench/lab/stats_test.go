package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestScheduleInterleaves(t *testing.T) {
	got := schedule([]string{"kernel", "egret"}, 3)
	want := []step{{0, "kernel"}, {0, "egret"}, {1, "kernel"}, {1, "egret"}, {2, "kernel"}, {2, "egret"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schedule = %v, want %v", got, want)
	}
	if got := schedule([]string{"a"}, 0); len(got) != 1 {
		t.Errorf("0 repetitions ran %d labs, want 1", len(got))
	}
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		in            []float64
		med, min, max float64
		str           string
	}{
		{[]float64{300, 100, 200}, 200, 100, 300, "200 (100–300)"},
		{[]float64{4, 1, 3, 2}, 2, 1, 4, "2 (1–4)"}, // even: the lower middle
		{[]float64{7}, 7, 7, 7, "7"},
	} {
		s := newSpread(c.in)
		if s.Median != c.med || s.Min != c.min || s.Max != c.max || s.String() != c.str {
			t.Errorf("newSpread(%v) = %+v %q, want median %v, %v–%v, %q", c.in, s, s.String(), c.med, c.min, c.max, c.str)
		}
	}
}

func TestGeneratorClose(t *testing.T) {
	if !generatorClose(140_000, 100_000) {
		t.Error("a ceiling 1.4× the rate is not flagged")
	}
	if generatorClose(160_000, 100_000) || generatorClose(1000, 0) {
		t.Error("a ceiling 1.6× the rate, or no rate, is flagged")
	}
}

// TestAggregate: three repetitions of one side fold into their medians,
// each figure from its own median, and the table shows spread and flag.
func TestAggregate(t *testing.T) {
	sc := scenario{Name: "est-10k", Underlay: "ipv4"}
	run := func(rep int, ndr, pdr, ceiling, p99 float64) *result {
		return &result{Scenario: sc, Mode: "egret", Rep: rep, GeneratorPPS: ceiling,
			NDR:     searchResult{Rate: ndr, Trial: trial{TaskNsPerPacket: 1e9 / ndr}},
			PDR:     searchResult{Rate: pdr},
			Latency: []latency{{Load: "50% of own NDR", P99: p99}}}
	}
	other := &result{Scenario: sc, Mode: "kernel", NDR: searchResult{Rate: 50}}
	got := aggregate([]*result{other, run(0, 100_000, 150_000, 400_000, 30), run(1, 130_000, 140_000, 180_000, 10), run(2, 120_000, 160_000, 190_000, 20)})
	if len(got) != 2 || got[0].Mode != "kernel" || got[1].Mode != "egret" {
		t.Fatalf("aggregate gave %d results, want kernel then egret", len(got))
	}
	e := got[1]
	if e.NDR.Rate != 120_000 || e.Rep != 2 || e.PDR.Rate != 150_000 || e.GeneratorPPS != 190_000 {
		t.Errorf("NDR %v (rep %d), PDR %v, ceiling %v; want 120000 (rep 2), 150000, 190000", e.NDR.Rate, e.Rep, e.PDR.Rate, e.GeneratorPPS)
	}
	if e.NDRSpread.Min != 100_000 || e.NDRSpread.Max != 130_000 || len(e.Reps) != 3 {
		t.Errorf("NDR spread %+v, %d reps", e.NDRSpread, len(e.Reps))
	}
	if e.NDRGeneratorClose || !e.PDRGeneratorClose {
		t.Errorf("flags NDR %v PDR %v, want only PDR (190000 < 1.5 × 150000)", e.NDRGeneratorClose, e.PDRGeneratorClose)
	}
	if l := e.Latency[0]; l.P99 != 20 || l.P99Spread.Min != 10 || l.P99Spread.Max != 30 {
		t.Errorf("p99 %v spread %+v, want 20 (10–30)", l.P99, l.P99Spread)
	}
	tab := (&report{Results: got, Reps: 3}).tables()
	if !strings.Contains(tab, "| est-10k | egret | 120000 (100000–130000) | 150000 (140000–160000) † |") {
		t.Errorf("table lacks the aggregated row:\n%s", tab)
	}
}

// flakyGateway forwards capacity frames per second, but the first
// full-length trial above it passes anyway (luck, as noise on a shared
// machine gives).
type flakyGateway struct {
	fakeGateway
	lucky bool
}

func (g *flakyGateway) trial(rate float64, d time.Duration) (trial, error) {
	t, err := g.fakeGateway.trial(rate, d)
	if d >= g.full && rate > g.capacity && !g.lucky {
		g.lucky = true
		t.Received = t.Sent
	}
	return t, err
}

// TestNDRNeedsConfirmation: a lucky pass above the capacity would be the
// NDR of one trial; its confirming trial fails and the search goes on
// below it, to a rate that passed twice.
func TestNDRNeedsConfirmation(t *testing.T) {
	const capacity = 100_000
	g := &flakyGateway{fakeGateway: fakeGateway{capacity: capacity, kindShort: 1, full: 5 * time.Second}}
	s := &searcher{cfg: searchConfig{Max: 1e6, Min: 1000, Full: 5 * time.Second, Goal: 0.01}, run: g.trial}
	r, err := s.findConfirmed("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	if !g.lucky {
		t.Fatal("the search never met the lucky trial: the test tests nothing")
	}
	if !r.Confirmed || r.Rate > capacity || r.Rate < capacity*0.98 {
		t.Errorf("got %+v, want a confirmed NDR within 2 %% below %d", r, capacity)
	}
	passes := 0
	for _, h := range s.history {
		if h.Offered() == r.Rate && h.passes(ndrLoss) && h.Duration == 5*time.Second {
			passes++
		}
	}
	if passes < 2 {
		t.Errorf("NDR %.0f passed %d full-length trials, want 2", r.Rate, passes)
	}
}

// TestNDRNeverConfirmed: a gateway that passes only once at any rate has
// no NDR.
func TestNDRNeverConfirmed(t *testing.T) {
	seen := map[int]bool{} // rates to 10 pps: the offered rate is a little below the one asked for
	once := func(rate float64, d time.Duration) (trial, error) {
		sent := uint64(rate * d.Seconds())
		t := trial{Sent: sent, Received: sent / 2, Seconds: d.Seconds()}
		if k := int(rate / 10); !seen[k] {
			seen[k], t.Received = true, sent
		}
		return t, nil
	}
	s := &searcher{cfg: searchConfig{Max: 1e6, Min: 1000, Full: 5 * time.Second, Goal: 0.01}, run: once}
	r, err := s.findConfirmed("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rate != 0 || r.Confirmed {
		t.Errorf("got %+v, want no NDR", r)
	}
}

// TestConfirmOfferedLess: when the generator offers less in the confirming
// trial, the NDR is the rate both trials passed, the lower.
func TestConfirmOfferedLess(t *testing.T) {
	calls := 0
	gen := func(rate float64, d time.Duration) (trial, error) {
		calls++
		if calls > 1 {
			rate *= 0.95
		}
		sent := uint64(rate * d.Seconds())
		return trial{Sent: sent, Received: sent, Seconds: d.Seconds()}, nil
	}
	s := &searcher{cfg: searchConfig{Max: 200_000, Min: 1000, Full: time.Second, Goal: 0.01}, run: gen}
	r, err := s.findConfirmed("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Confirmed || r.Rate != 190_000 || r.Trials != 2 {
		t.Errorf("got %+v, want 190000 confirmed in 2 trials", r)
	}
}
