package report

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tenure-io/tenure/bench/internal/suite"
)

var palette = []color.Color{
	color.RGBA{R: 0x41, G: 0x69, B: 0xe1, A: 0xff},
	color.RGBA{R: 0xe6, G: 0x7e, B: 0x22, A: 0xff},
	color.RGBA{R: 0x27, G: 0xae, B: 0x60, A: 0xff},
	color.RGBA{R: 0x8e, G: 0x44, B: 0xad, A: 0xff},
	color.RGBA{R: 0xc0, G: 0x39, B: 0x2b, A: 0xff},
	color.RGBA{R: 0x16, G: 0xa0, B: 0x85, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x8c, B: 0x8d, A: 0xff},
	color.RGBA{R: 0xf1, G: 0xc4, B: 0x0f, A: 0xff},
}

// WriteCharts writes <dir>/<suite id>.png: median req/s and p50/p99 per system.
func (r *Run) WriteCharts(dir string) error {
	for _, sr := range r.Suites {
		if err := r.chart(sr, filepath.Join(dir, sr.Suite.ID()+".png")); err != nil {
			return fmt.Errorf("chart %s: %w", sr.Suite.ID(), err)
		}
	}
	return nil
}

func (r *Run) chart(sr *SuiteResult, path string) error {
	type val struct {
		label string
		m     suite.Result
	}
	var vals []val
	for _, sl := range sr.Rows {
		if m, ok := Median(sr.Runs[sl.Label]); ok {
			vals = append(vals, val{sl.Label, m})
		}
	}
	if len(vals) == 0 {
		return nil
	}
	// Two plots side by side: throughput, and latency (p50, p99).
	tp := plot.New()
	unit := "req/s"
	if c, ok := sr.Suite.(suite.Comparer); ok {
		unit = c.Unit()
	}
	tp.Title.Text = sr.Suite.Title() + " — " + unit + " (median)"
	tp.Y.Label.Text = unit
	lp := plot.New()
	lp.Title.Text = "latency (median), ms"
	lp.Y.Label.Text = "ms"
	w := vg.Points(18)
	if len(vals) > 4 {
		w = vg.Points(12)
	}
	for i, v := range vals {
		bc, err := plotter.NewBarChart(plotter.Values{v.m.RPS}, w)
		if err != nil {
			return err
		}
		bc.Color = palette[i%len(palette)]
		bc.Offset = w * vg.Length(float64(i)-float64(len(vals)-1)/2)
		tp.Add(bc)
		tp.Legend.Add(v.label, bc)

		lc, err := plotter.NewBarChart(plotter.Values{ms64(v.m.P50), ms64(v.m.P99)}, w)
		if err != nil {
			return err
		}
		lc.Color = palette[i%len(palette)]
		lc.Offset = w * vg.Length(float64(i)-float64(len(vals)-1)/2)
		lp.Add(lc)
		lp.Legend.Add(v.label, lc)
	}
	maxRPS, maxLat := 0.0, 0.0
	for _, v := range vals {
		maxRPS = max(maxRPS, v.m.RPS)
		maxLat = max(maxLat, ms64(v.m.P99), ms64(v.m.P50))
	}
	tp.NominalX("")
	lp.NominalX("p50", "p99")
	for _, p := range []*plot.Plot{tp, lp} {
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.XOffs = vg.Points(8)
		p.Y.Min = 0
	}
	// Headroom above the bars for the legend.
	head := 1.0 + 0.18*float64(len(vals))
	tp.Y.Max = maxRPS * head
	lp.Y.Max = maxLat * head
	tp.X.Min, tp.X.Max = -1, 1
	lp.X.Min, lp.X.Max = -0.7, 1.7

	height := vg.Points(360)
	if len(vals) > 4 {
		height = vg.Points(360 + 40*float64(len(vals)-4))
	}
	img := vgimg.New(vg.Points(860), height)
	dc := draw.New(img)
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	cs := plot.Align([][]*plot.Plot{{tp, lp}}, t, dc)
	tp.Draw(cs[0][0])
	lp.Draw(cs[0][1])
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

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
