package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Series is one line of a time plot.
type Series struct {
	Name string
	X, Y []float64
}

// Line is a horizontal reference (a threshold).
type Line struct {
	Name string
	Y    float64
}

// TimePlot draws series against time like the thesis' figures and saves a
// PNG. NaN points break the line instead of drawing to zero.
func TimePlot(path, title, xlabel, ylabel string, series []Series, refs []Line) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	for i, s := range series {
		for k, seg := range segments(s.X, s.Y) {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.2)
			p.Add(l)
			if k == 0 {
				p.Legend.Add(s.Name, l)
			}
		}
	}
	for _, r := range refs {
		xmin, xmax := p.X.Min, p.X.Max
		l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: r.Y}, {X: xmax, Y: r.Y}})
		if err != nil {
			return err
		}
		l.Color = color.RGBA{R: 200, A: 255}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(r.Name, l)
	}
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

func segments(x, y []float64) []plotter.XYs {
	var segs []plotter.XYs
	var cur plotter.XYs
	for i := range x {
		if math.IsNaN(y[i]) || math.IsInf(y[i], 0) {
			if len(cur) > 0 {
				segs = append(segs, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: x[i], Y: y[i]})
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	if len(segs) == 0 {
		segs = append(segs, plotter.XYs{{}})
	}
	return segs
}

// Bar is one bar with an error bar.
type Bar struct {
	Label      string
	Value, Err float64
}

// BarPlot draws bars with standard-error whiskers (thesis Fig 5.5/5.6).
func BarPlot(path, title, ylabel string, bars []Bar) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	vals := make(plotter.Values, len(bars))
	errs := make(plotter.YErrors, len(bars))
	names := make([]string, len(bars))
	for i, b := range bars {
		vals[i] = b.Value
		errs[i].Low, errs[i].High = b.Err, b.Err
		names[i] = b.Label
	}
	bc, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return err
	}
	bc.Color = plotutil.Color(0)
	p.Add(bc)
	pts := make(plotter.XYs, len(bars))
	for i, b := range bars {
		pts[i] = plotter.XY{X: float64(i), Y: b.Value}
	}
	eb, err := plotter.NewYErrorBars(struct {
		plotter.XYs
		plotter.YErrors
	}{pts, errs})
	if err != nil {
		return err
	}
	p.Add(eb)
	p.NominalX(names...)
	return p.Save(9*vg.Inch, 4.5*vg.Inch, path)
}

// ControlledPlots are a controlled experiment's time series, a curve per
// run, the lab's and the simulator's: the reader's wait, the
// interferers' rate, the delay applied and the write caps.
type ControlledPlots struct{ Wait, Rate, Delay, Caps []Series }

// ControlledTitles title ControlledPlots' plots ("": not drawn); the rate
// plot's file is RateFile.
type ControlledTitles struct{ Wait, RateFile, Rate, Delay, Caps string }

// ControlledTitlesOf titles experiment name's plots, the lab's and the
// simulator's: a load of writers (the thesis' figures) or, where they
// read (a backup, mixed I/O), of many.
func ControlledTitlesOf(name string, writers int, reads bool, many string) ControlledTitles {
	t := ControlledTitles{Wait: name + ": reader's wait, agent off and on (per threshold)", RateFile: "write-rate.png",
		Rate:  fmt.Sprintf("%s: aggregate write rate of the %d writers (Fig 5.10/5.12)", name, writers),
		Delay: name + ": write delay applied to the throttleable set (Fig 5.13)"}
	if !reads {
		t.Wait += " (Fig 5.9/5.11)"
		return t
	}
	t.RateFile, t.Rate = "interferer-rate.png", fmt.Sprintf("%s: aggregate read + write rate of the %s", name, many)
	t.Delay = name + ": largest read and write delay applied to the throttleable set"
	return t
}

// Write draws the plots in dir, the thresholds as the wait plot's
// reference lines.
func (pl *ControlledPlots) Write(dir string, t ControlledTitles, thresholds []time.Duration) error {
	var refs []Line
	for _, thr := range thresholds {
		refs = append(refs, Line{Name: fmt.Sprintf("%v", thr), Y: float64(thr) / 1e6})
	}
	for _, p := range []struct {
		file, title, ylabel string
		series              []Series
		refs                []Line
	}{
		{BeforeAfterPlot, t.Wait, "read wait (ms, EWMA 0.15)", pl.Wait, refs},
		{t.RateFile, t.Rate, "MB/s (EWMA 0.15)", pl.Rate, nil},
		{"delay.png", t.Delay, "delay (ms)", pl.Delay, nil},
		{"write-caps.png", t.Caps, "MB/s", pl.Caps, nil},
	} {
		if p.title == "" {
			continue
		}
		if err := TimePlot(filepath.Join(dir, p.file), p.title, "time (s)", p.ylabel, p.series, p.refs); err != nil {
			return err
		}
	}
	return nil
}
