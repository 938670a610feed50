package metrics

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// renderedPanels are the dashboard's main panels, drawn in this order.
var renderedPanels = []string{
	"Throughput (packets/s)", "Drops by reason (packets/s)",
	"Flows", "NAT port use per egress IP",
	"Egress IPs assigned per node", "Failovers",
}

var legendVar = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// renderDashboard draws the main panels of d from range queries against
// api over [start, end] into a PNG at path.
func renderDashboard(api promAPI, d dashboard, start, end time.Time, path string) error {
	var plots []*plot.Plot
	for _, title := range renderedPanels {
		found := false
		for _, pn := range d.Panels {
			if pn.Title != title {
				continue
			}
			found = true
			p := plot.New()
			p.Title.Text = title
			p.X.Label.Text = "seconds"
			p.Legend.Top = true
			p.Legend.TextStyle.Font.Size = vg.Points(7)
			p.Add(plotter.NewGrid())
			i := 0
			for _, tg := range pn.Targets {
				r, err := api.queryRange(grafanaVars.Replace(tg.Expr), start, end, time.Second)
				if err != nil {
					return fmt.Errorf("panel %q: %w", title, err)
				}
				for _, s := range r.Result {
					var xy plotter.XYs
					for _, v := range s.Values {
						ts, _ := v[0].(float64)
						str, _ := v[1].(string)
						y, err := strconv.ParseFloat(str, 64)
						if err != nil || math.IsNaN(y) || math.IsInf(y, 0) {
							continue
						}
						xy = append(xy, plotter.XY{X: ts - float64(start.Unix()), Y: y})
					}
					if len(xy) == 0 {
						continue
					}
					l, err := plotter.NewLine(xy)
					if err != nil {
						return err
					}
					l.Color = plotutil.Color(i)
					l.Width = vg.Points(1.5)
					i++
					p.Add(l)
					name := legendVar.ReplaceAllStringFunc(tg.LegendFormat, func(m string) string {
						return s.Metric[legendVar.FindStringSubmatch(m)[1]]
					})
					p.Legend.Add(name, l)
				}
			}
			if i == 0 {
				return fmt.Errorf("panel %q: no data to draw", title)
			}
			plots = append(plots, p)
		}
		if !found {
			return fmt.Errorf("dashboard has no panel %q", title)
		}
	}
	const cols = 2
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range plots {
		grid[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Points(1100), vg.Points(float64(300*rows)))
	dc := draw.New(img)
	canv := plot.Align(grid, draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(12),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canv[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
