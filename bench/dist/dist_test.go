package dist

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Nearest rank: the p-th percentile is a value of the sample, the smallest
// with at least p % of the sample at or below it.
func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(d)
	if s.N != 100 || s.Min != 1 || s.P50 != 50 || s.P90 != 90 || s.P99 != 99 || s.Max != 100 {
		t.Errorf("Summarize(1..100 ms) = %+v", s)
	}
	if got := Percentile([]float64{3}, 99); got != 3 {
		t.Errorf("p99 of one value = %v", got)
	}
	if got := Percentile([]float64{1, 2, 3, 4}, 50); got != 2 {
		t.Errorf("p50 of 1..4 = %v, want 2", got)
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("an empty sample has a summary")
	}
	c := CDF("x", []float64{2, 1})
	if len(c.XY) != 4 || c.XY[0].X != 1 || c.XY[3].Y != 1 {
		t.Errorf("CDF = %v", c.XY)
	}
	p := filepath.Join(t.TempDir(), "cdf.png")
	if err := SavePNG(p, "t", "x", "y", c); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
		t.Fatalf("no plot: %v", err)
	}
}
