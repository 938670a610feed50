package main

import (
	"math"
	"testing"
	"time"
)

// fakeGateway forwards up to capacity frames per second over a full-length
// trial and loses the excess; short trials are kinder by kindShort (buffers
// hide a short overload), as on a real gateway.
type fakeGateway struct {
	capacity, kindShort float64
	full                time.Duration
	calls               int
}

func (g *fakeGateway) trial(rate float64, d time.Duration) (trial, error) {
	g.calls++
	c := g.capacity
	if d < g.full {
		c *= g.kindShort
	}
	sent := uint64(rate * d.Seconds())
	recv := sent
	if rate > c {
		recv = uint64(c * d.Seconds())
	}
	return trial{Sent: sent, Received: recv, Seconds: d.Seconds()}, nil
}

func TestSearchFindsNDRAndPDR(t *testing.T) {
	const capacity = 123_456
	g := &fakeGateway{capacity: capacity, kindShort: 1.15, full: 5 * time.Second}
	s := &searcher{cfg: searchConfig{Max: 1e6, Min: 1000, Full: 5 * time.Second, Short: time.Second, Goal: 0.01, Coarse: 0.1}, run: g.trial}
	pdr, err := s.find("PDR", pdrLoss)
	if err != nil {
		t.Fatal(err)
	}
	ndr, err := s.find("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	// PDR: loss (r-C)/r ≤ 0.5 % up to C/0.995.
	if want := capacity / (1 - pdrLoss); pdr.Rate > want || pdr.Rate < want*(1-0.011) {
		t.Errorf("PDR = %.0f, want within 1.1 %% below %.0f", pdr.Rate, want)
	}
	if ndr.Rate > capacity || ndr.Rate < capacity*(1-0.011) {
		t.Errorf("NDR = %.0f, want within 1.1 %% below %d", ndr.Rate, capacity)
	}
	for name, r := range map[string]searchResult{"NDR": ndr, "PDR": pdr} {
		if r.Trial.Duration != 5*time.Second {
			t.Errorf("%s rests on a %v trial, want a full-length one", name, r.Trial.Duration)
		}
		if r.Limited {
			t.Errorf("%s reported generator-limited", name)
		}
	}
	// NDR reused PDR's trials, so it needed fewer.
	if ndr.Trials >= pdr.Trials+3 {
		t.Errorf("NDR took %d trials after PDR's %d: history not shared", ndr.Trials, pdr.Trials)
	}
	if g.calls > 2*16 {
		t.Errorf("%d trials", g.calls)
	}
}

func TestSearchGeneratorLimited(t *testing.T) {
	g := &fakeGateway{capacity: 1e9, kindShort: 1, full: 5 * time.Second}
	s := &searcher{cfg: searchConfig{Max: 2e5, Full: 5 * time.Second, Goal: 0.01}, run: g.trial}
	r, err := s.find("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Limited || math.Abs(r.Rate-2e5) > 1 || r.Trials != 1 {
		t.Errorf("got %+v, want the generator's 200000 in one trial, marked limited", r)
	}
}

func TestSearchNothingPasses(t *testing.T) {
	g := &fakeGateway{capacity: 0, kindShort: 1, full: 5 * time.Second}
	s := &searcher{cfg: searchConfig{Max: 1e6, Min: 1000, Full: 5 * time.Second, Goal: 0.01}, run: g.trial}
	r, err := s.find("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rate != 0 || r.Trials > 16 {
		t.Errorf("got rate %.0f after %d trials, want 0 within the cap", r.Rate, r.Trials)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := int64(1); i <= 100000; i++ {
		h.add(i * 100) // 100 ns … 10 ms, uniform
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 1e7
		if got := h.quantile(q); math.Abs(got-want)/want > 0.02 {
			t.Errorf("q%.3f = %.0f ns, want %.0f ± 2 %%", q, got, want)
		}
	}
}

// TestSearchGeneratorFallsShort: a generator that offers only 90 % of
// what it is asked for cannot narrow the interval forever; the search
// stops, keeps a full-length pass and says the generator limited it.
func TestSearchGeneratorFallsShort(t *testing.T) {
	g := &fakeGateway{capacity: 150_000, kindShort: 1, full: 5 * time.Second}
	short := func(rate float64, d time.Duration) (trial, error) {
		if rate > 100_000 {
			rate = 100_000 // the generator's own ceiling, below the gateway's
		}
		return g.trial(rate, d)
	}
	s := &searcher{cfg: searchConfig{Max: 200_000, Min: 1000, Full: 5 * time.Second, Goal: 0.01}, run: short}
	r, err := s.find("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Limited || r.Rate != 100_000 || r.Trials > 4 {
		t.Errorf("got %+v, want 100000 marked generator-limited within 4 trials", r)
	}
}

// TestSearchGeneratorLags: a generator that offers 90 % of every rate
// asked for still gives a full-length NDR near the gateway's capacity.
func TestSearchGeneratorLags(t *testing.T) {
	g := &fakeGateway{capacity: 100_000, kindShort: 1.1, full: 5 * time.Second}
	lag := func(rate float64, d time.Duration) (trial, error) { return g.trial(0.9*rate, d) }
	s := &searcher{cfg: searchConfig{Max: 400_000, Min: 1000, Full: 5 * time.Second, Short: time.Second, Goal: 0.02, Coarse: 0.1}, run: lag}
	r, err := s.find("NDR", ndrLoss)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rate < 90_000 || r.Rate > 100_000 || r.Trial.Duration != 5*time.Second {
		t.Errorf("got %.0f from a %v trial, want 90000–100000 from a full one", r.Rate, r.Trial.Duration)
	}
}
