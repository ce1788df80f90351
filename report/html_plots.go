package report

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
)

// This file draws the report's figures: the plots an experiment declares
// for its summary.json, and the per-phase read-wait and write-rate plots
// of a lab trace.csv. It is its own file because it is the part of the
// report that knows the trace format; html.go only lays out the page and
// html_summary.go renders any summary.

// ---- plots from the summary ----------------------------------------------

// SummaryPlot is a figure an experiment's summary gives at a glance: its
// file name and how to draw it to a path, or a nil draw when the summary
// has nothing to plot. Each experiment declares its own
// (lab/experiments), which registers them here by its name.
type SummaryPlot func(experiment string, o object) (name string, draw func(path string) error)

// plotsOf are the registered experiments' plots, by experiment.
var plotsOf = map[string][]SummaryPlot{}

// RegisterPlots declares experiment's plots: Generate draws them for any
// run whose summary names it.
func RegisterPlots(experiment string, plots ...SummaryPlot) {
	plotsOf[experiment] = append(plotsOf[experiment], plots...)
}

// summaryPlots draws what an experiment's summary says at a glance;
// experiments that registered none get none (their tables still render).
func summaryPlots(dir, experiment string, o object) ([]string, error) {
	var out []string
	for _, plot := range plotsOf[experiment] {
		name, draw := plot(experiment, o)
		if draw == nil {
			continue
		}
		if err := draw(filepath.Join(dir, name)); err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, name)
	}
	return out, nil
}

// The experiments' plots: each returns its file name and how to draw it
// to a path, or a nil draw when the summary has nothing to plot.

// WaitVsThresholdPlot: the reader's mean and p95 read wait per threshold
// and unthrottled, at the target and, where logged, its p95 at the
// initiator (the controlled experiments).
func WaitVsThresholdPlot(experiment string, o object) (string, func(path string) error) {
	reg := summaryRows(o, "regulated")
	if len(reg) == 0 {
		return "", nil
	}
	var bars []Bar
	add := func(name string, r object) {
		bars = append(bars, Bar{Label: name + " mean", Value: dig(r, "read_wait_ms", "mean")}, Bar{Label: name + " p95", Value: dig(r, "read_wait_ms", "p95")})
		if v := dig(r, "initiator", "window_ms", "p95"); !math.IsNaN(v) {
			bars = append(bars, Bar{Label: name + " init p95", Value: v})
		}
	}
	for _, r := range reg {
		thr := dig(r, "threshold_ms")
		bars = append(bars, Bar{Label: fmt.Sprintf("%g thr", thr), Value: thr})
		add(fmt.Sprintf("%g", thr), r)
	}
	if b, ok := o.get("baseline").(object); ok {
		add("free", b)
	}
	return "report-wait-vs-threshold.png", func(p string) error {
		return BarPlot(p, experiment+": read wait per threshold (thr, mean, p95; init p95: at the initiator, per 100 ms) and unthrottled", "read wait (ms)", bars)
	}
}

// WaitVsWritersPlot: the reader's read wait against its concurrent
// writers (interference).
func WaitVsWritersPlot(experiment string, o object) (string, func(path string) error) {
	var x, p95, mean []float64
	for _, r := range summaryRows(o, "runs") {
		x = append(x, dig(r, "writers"))
		p95 = append(p95, dig(r, "read_wait_ms", "p95"))
		mean = append(mean, dig(r, "read_wait_ms", "mean"))
	}
	if len(x) == 0 {
		return "", nil
	}
	return "report-wait-vs-writers.png", func(p string) error {
		return TimePlot(p, experiment+": read wait vs concurrent writers", "writers", "read wait (ms)",
			[]Series{{Name: "p95", X: x, Y: p95}, {Name: "mean", X: x, Y: mean}}, nil)
	}
}

// RateVsDelayPlot: throughput against the added delay, per direction
// and backend (delay-sweep, delay-sweep-fresh).
func RateVsDelayPlot(experiment string, o object) (string, func(path string) error) {
	by := map[string]*Series{}
	var order []string
	type point struct {
		prefix string
		o      object
	}
	var pts []point
	for _, r := range summaryRows(o, "points") {
		pts = append(pts, point{"", r})
	}
	// Run with --backends: each backend's points, named by it.
	for _, run := range summaryRows(o, "runs") {
		be, _ := run.get("backend").(string)
		sum, _ := run.get("summary").(object)
		if sum == nil {
			continue
		}
		a, _ := sum.get("points").([]any)
		for _, e := range a {
			if x, ok := e.(object); ok {
				pts = append(pts, point{be + " ", x})
			}
		}
	}
	for _, pt := range pts {
		r := pt.o
		dd, _ := r.get("direction").(string)
		d := pt.prefix + dd
		s := by[d]
		if s == nil {
			s = &Series{Name: d}
			by[d] = s
			order = append(order, d)
		}
		s.X = append(s.X, dig(r, "delay_ms"))
		s.Y = append(s.Y, dig(r, "mb_s"))
	}
	var ss []Series
	for _, d := range order {
		ss = append(ss, *by[d])
	}
	if len(ss) == 0 {
		return "", nil
	}
	return "report-rate-vs-delay.png", func(p string) error {
		return TimePlot(p, experiment+": throughput vs added delay", "delay (ms)", "MB/s", ss, nil)
	}
}

// PerHostPlot: each host's throughput (equal-share).
func PerHostPlot(experiment string, o object) (string, func(path string) error) {
	h, ok := o.get("per_host_mb_s").(object)
	if !ok {
		return "", nil
	}
	var bars []Bar
	for _, f := range h {
		bars = append(bars, Bar{Label: f.Key, Value: num(f.Val)})
	}
	return "report-per-host.png", func(p string) error {
		return BarPlot(p, experiment+": throughput per host", "MB/s", bars)
	}
}

// summaryRows is the summary's array key, its objects only.
func summaryRows(o object, key string) []object {
	a, _ := o.get(key).([]any)
	var r []object
	for _, e := range a {
		if x, ok := e.(object); ok {
			r = append(r, x)
		}
	}
	return r
}

// dig is the number at path below x; NaN where there is none.
func dig(x object, path ...string) float64 {
	var v any = x
	for _, p := range path {
		ob, ok := v.(object)
		if !ok {
			return math.NaN()
		}
		v = ob.get(p)
	}
	return num(v)
}

// thresholds finds the run's thresholds (threshold_ms anywhere in the
// summary) to draw as reference lines.
func thresholds(o object) []float64 {
	var out []float64
	seen := map[float64]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case object:
			for _, f := range x {
				if f.Key == "threshold_ms" {
					if t := num(f.Val); !math.IsNaN(t) && !seen[t] {
						seen[t] = true
						out = append(out, t)
					}
				}
				walk(f.Val)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(o)
	return out
}

// ---- plots from trace.csv ---------------------------------------------------

// maxTracePhases bounds the series per trace plot: beyond it (overhead has
// 80 phase×repeat runs) a plot is unreadable and the tables say more.
const maxTracePhases = 8

// tracePlots draws, per phase (first repeat), the read wait averaged over
// the devices that had reads (smoothed like the thesis' figures, EWMA
// α 0.15) and the write rate summed over devices, against time in phase.
func tracePlots(dir, path string, thr []float64) ([]string, error) {
	runs, err := ReadTrace(path, func(_ string, repeat int) bool { return repeat == 0 })
	if err != nil || len(runs) == 0 {
		return nil, err
	}
	var wait, write []Series
	for _, run := range runs[:min(len(runs), maxTracePhases)] {
		ws, wr := traceSeries(run)
		wait, write = append(wait, ws), append(write, wr)
	}
	var refs []Line
	for _, t := range thr {
		refs = append(refs, Line{Name: fmt.Sprintf("threshold %g ms", t), Y: t})
	}
	var out []string
	if err := TimePlot(filepath.Join(dir, "report-trace-read-wait.png"), "Read wait per phase (EWMA α 0.15, devices with reads)",
		"time in phase (s)", "read wait (ms)", wait, refs); err != nil {
		return nil, err
	}
	out = append(out, "report-trace-read-wait.png")
	if err := TimePlot(filepath.Join(dir, "report-trace-write-rate.png"), "Write rate per phase (all devices)",
		"time in phase (s)", "MB/s", write, nil); err != nil {
		return nil, err
	}
	return append(out, "report-trace-write-rate.png"), nil
}

// traceSeries is a run's read wait (EWMA α 0.15 over the ticks with
// reads) and write rate against time in phase. Each device's wait is
// weighted by its reads: the resource's wait is total read ticks over
// total reads, as iostat would compute it.
func traceSeries(run *TraceRun) (wait, write Series) {
	ticks := slices.Clone(run.Ticks)
	slices.SortFunc(ticks, func(a, b Tick) int { return cmp.Compare(a.T, b.T) })
	wait, write = Series{Name: run.Phase}, Series{Name: run.Phase}
	last := math.NaN()
	for _, t := range ticks {
		var waitSum, reads, wv float64
		writes := false
		for _, h := range slices.Sorted(maps.Keys(t.Dev)) {
			iv := t.Dev[h]
			if !math.IsNaN(iv.ReadWaitMs) && iv.Reads > 0 {
				waitSum, reads = waitSum+iv.ReadWaitMs*float64(iv.Reads), reads+float64(iv.Reads)
			}
			if !math.IsNaN(iv.WriteBps) {
				wv, writes = wv+iv.WriteBps/1e6, true
			}
		}
		if !writes {
			wv = math.NaN()
		}
		if reads > 0 {
			if v := waitSum / reads; math.IsNaN(last) {
				last = v
			} else {
				last = 0.15*v + 0.85*last
			}
		}
		wait.X, wait.Y = append(wait.X, t.T), append(wait.Y, last)
		write.X, write.Y = append(write.X, t.T), append(write.Y, wv)
	}
	return wait, write
}
