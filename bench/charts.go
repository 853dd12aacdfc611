package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart geometry and the colour and marker of each target, the same in
// every chart.
const (
	chartWidth  = 8 * vg.Inch
	chartHeight = 5 * vg.Inch
)

var targetStyle = map[Target]struct {
	color color.Color
	shape draw.GlyphDrawer
}{
	Lockproxy: {color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, draw.CircleGlyph{}},
	Redsync:   {color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.SquareGlyph{}},
	Direct:    {color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, draw.TriangleGlyph{}},
}

// writeCharts draws the acquire-release charts into dir. Without
// acquire-release results there is nothing to draw.
func (res *Results) writeCharts(dir string) error {
	if len(res.AcquireRelease) == 0 {
		return nil
	}
	if err := res.throughputChart(filepath.Join(dir, ThroughputPNG)); err != nil {
		return fmt.Errorf("bench: %s: %w", ThroughputPNG, err)
	}
	if err := res.latencyCDFChart(filepath.Join(dir, LatencyCDFPNG)); err != nil {
		return fmt.Errorf("bench: %s: %w", LatencyCDFPNG, err)
	}
	return nil
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.X.Label.TextStyle.Font.Size = vg.Points(12)
	p.Y.Label.TextStyle.Font.Size = vg.Points(12)
	p.Legend.TextStyle.Font.Size = vg.Points(12)
	p.Add(plotter.NewGrid())
	return p
}

// throughputChart plots pairs/s against the number of workers, one line per
// target.
func (res *Results) throughputChart(path string) error {
	p := newPlot(fmt.Sprintf("go-redis acquire+release, %d masters", res.Config.Masters), "workers", "pairs/s")
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(4)
	ymax := 0.0
	for _, t := range res.Config.Targets {
		var xys plotter.XYs
		for _, w := range res.Config.Workers {
			if r := res.find(ScenarioAcquireRelease, t, w); r != nil { // the median round
				xys = append(xys, plotter.XY{X: float64(r.Workers), Y: r.Throughput()})
				ymax = max(ymax, r.Throughput())
			}
		}
		if len(xys) == 0 {
			continue
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		st := targetStyle[t]
		l.Color, l.Width = st.color, vg.Points(2)
		s.Color, s.Shape, s.Radius = st.color, st.shape, vg.Points(4)
		p.Add(l, s)
		p.Legend.Add(string(t), l, s)
	}
	var ticks plot.ConstantTicks
	for _, w := range res.Config.Workers {
		ticks = append(ticks, plot.Tick{Value: float64(w), Label: fmt.Sprint(w)})
	}
	p.X.Tick.Marker = ticks
	lo, hi := float64(slices.Min(res.Config.Workers)), float64(slices.Max(res.Config.Workers))
	pad := max(1, (hi-lo)*0.08)
	p.X.Min, p.X.Max = lo-pad, hi+pad
	// Leave room above the highest point for the legend.
	p.Y.Min, p.Y.Max = 0, ymax*1.3
	p.Y.Tick.Marker = linearTicks{}
	return p.Save(chartWidth, chartHeight, path)
}

// latencyCDFChart plots the CDF of acquire latency at the largest worker
// count, log x, one line per target.
func (res *Results) latencyCDFChart(path string) error {
	w := slices.Max(res.Config.Workers)
	p := newPlot(fmt.Sprintf("acquire latency CDF, %d workers, %d masters", w, res.Config.Masters),
		"acquire latency (ms, log scale)", "fraction of acquisitions ≤ x")
	// Top left stays empty: no target answers most acquisitions in the
	// first fraction of the range.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(8)
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	var yt plot.ConstantTicks
	for i := 0; i <= 10; i++ {
		yt = append(yt, plot.Tick{Value: float64(i) / 10, Label: fmt.Sprintf("%.1f", float64(i)/10)})
	}
	p.Y.Tick.Marker = yt
	lo, hi := math.Inf(1), 0.0
	for _, t := range res.Config.Targets {
		r := res.find(ScenarioAcquireRelease, t, w)
		if r == nil || len(r.Lat) == 0 {
			continue
		}
		ms, frac := r.Lat.cdfPoints(500)
		xys := make(plotter.XYs, len(ms))
		for i := range ms {
			xys[i] = plotter.XY{X: max(ms[i], 0.001), Y: frac[i]}
			lo, hi = min(lo, xys[i].X), max(hi, xys[i].X)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color, l.Width = targetStyle[t].color, vg.Points(2)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p99 %s ms)", t, fmtMs(r.Lat.Quantile(0.99))), l)
	}
	if hi > 0 {
		p.X.Min, p.X.Max = lo/1.2, hi*1.2
	}
	return p.Save(chartWidth, chartHeight, path)
}

// logTicks labels 1-2-5 steps of each decade, which plot.LogTicks leaves
// bare when the range spans only one or two decades.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = fmt.Sprintf("%g", v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// linearTicks labels about six round values (1, 2 or 5 times a power of ten
// apart), thousands as "k".
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/6)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(m*step) <= 7 {
			step *= m
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		label := fmt.Sprintf("%g", v)
		if v >= 1000 {
			label = fmt.Sprintf("%gk", v/1000)
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}
