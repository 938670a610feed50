// Package dist is what the benchmark programs of bench/ share: summaries
// of measured durations (percentiles, nearest rank), PNG plots drawn with
// gonum/plot, the machine's load and the egret binary they run.
package dist

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Summary is a sample of durations in milliseconds.
type Summary struct {
	N   int     `json:"n"`
	Min float64 `json:"min_ms"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Summarize returns the summary of d (zero when d is empty).
func Summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	ms := Millis(d)
	slices.Sort(ms)
	return Summary{N: len(ms), Min: ms[0], P50: Percentile(ms, 50), P90: Percentile(ms, 90), P99: Percentile(ms, 99), Max: ms[len(ms)-1]}
}

// Millis converts d to milliseconds.
func Millis(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = float64(x) / float64(time.Millisecond)
	}
	return out
}

// Percentile is the nearest-rank p-th percentile of sorted (ascending): the
// smallest value with at least p % of the sample at or below it.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// String is the summary as "p50 12.3 ms, p99 45.6 ms (n=100)".
func (s Summary) String() string {
	return fmt.Sprintf("p50 %.1f ms, p99 %.1f ms, max %.1f ms (n=%d)", s.P50, s.P99, s.Max, s.N)
}

// Series is one named line of a plot.
type Series struct {
	Name string
	XY   plotter.XYs
}

// CDF is the empirical distribution of values (any order) as a step line:
// x the value, y the fraction of the sample at or below it.
func CDF(name string, values []float64) Series {
	v := slices.Clone(values)
	slices.Sort(v)
	xy := make(plotter.XYs, 0, 2*len(v))
	for i, x := range v {
		xy = append(xy, plotter.XY{X: x, Y: float64(i) / float64(len(v))}, plotter.XY{X: x, Y: float64(i+1) / float64(len(v))})
	}
	return Series{Name: name, XY: xy}
}

// SavePNG draws the series as lines on one plot and writes it to path.
func SavePNG(path, title, xLabel, yLabel string, series ...Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	for i, s := range series {
		if len(s.XY) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.XY)
		if err != nil {
			return fmt.Errorf("plot %s, series %s: %w", title, s.Name, err)
		}
		l.Color = plotColors[i%len(plotColors)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
		return fmt.Errorf("writing the plot %s: %w", path, err)
	}
	return nil
}

var plotColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
}
