package report

import (
	"math"
	"time"

	"github.com/sanqos/sanqos/sample"
)

// Round rounds v to d decimals; NaN and ±Inf become 0 (JSON has neither).
func Round(v float64, d int) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}

// RoundDist rounds a distribution's figures to 2 decimals.
func RoundDist(d Dist) Dist {
	d.Mean, d.P50, d.P95, d.P99, d.Max = Round(d.Mean, 2), Round(d.P50, 2), Round(d.P95, 2), Round(d.P99, 2), Round(d.Max, 2)
	return d
}

// Smooth is the EWMA (α 0.15, the thesis' plotting filter) the plots and
// the settling time use; NaN samples hold the last value.
func Smooth(y []float64) []float64 {
	out := make([]float64, len(y))
	l := math.NaN()
	for i, v := range y {
		if !math.IsNaN(v) {
			if math.IsNaN(l) {
				l = v
			} else {
				l = 0.15*v + 0.85*l
			}
		}
		out[i] = l
	}
	return out
}

// Regulation computes how well a threshold held, the same way for lab and
// simulator runs: pctAbove is the share of intervals in the analysis window
// (waits) whose read wait exceeded 1.2 × threshold; settleS is, averaged
// over the writers' on-steps (steps, each on for onS seconds), the time
// from the step until the smoothed wait (x, y: the whole phase) last
// crossed above 1.2 × threshold during that on-period.
func Regulation(thresholdMs float64, waits, x, y, steps []float64, onS float64) (pctAbove, settleS float64) {
	limit := 1.2 * thresholdMs
	var n, above int
	for _, w := range waits {
		if !math.IsNaN(w) {
			n++
			if w > limit {
				above++
			}
		}
	}
	if n > 0 {
		pctAbove = Round(100*float64(above)/float64(n), 2)
	}
	sm := Smooth(y)
	var settle []float64
	for _, s := range steps {
		last := s
		for i := range x {
			if x[i] > s && x[i] <= s+onS && sm[i] > limit {
				last = x[i]
			}
		}
		settle = append(settle, last-s)
	}
	m, _ := MeanStderr(settle)
	return pctAbove, Round(m, 2)
}

// The interval figures the controlled runs are judged by.
func readWait(iv sample.Interval) float64 { return iv.ReadWaitMs }
func writeMBs(iv sample.Interval) float64 { return iv.WriteBps / 1e6 }
func readMBs(iv sample.Interval) float64  { return iv.ReadBps / 1e6 }

// JudgeControlled is a controlled run's figures, the lab's and the
// simulator's (thr 0: the baseline's): reader's wait over window, the
// interferers' (hosts) aggregate write rate and, where they read (reads),
// their read rate, whose reads then date a load step as writes do; the
// first second after each on-step (steps, on for onS s; q gives the
// onsets a floor where the queue was logged); and, regulated, the share
// of intervals above 1.2 × threshold and the mean settling time.
func JudgeControlled[T Ticker](ticks, window []T, reader string, hosts []string, thr time.Duration, steps []float64, onS float64, reads bool, q *OnsetQueue) ControlledRun {
	waits := Values(window, reader, readWait)
	run := ControlledRun{ThresholdMs: float64(thr) / 1e6, ReadWaitMs: RoundDist(Describe(waits)), WriteMBs: Round(Aggregate(window, hosts, writeMBs), 2)}
	var onset Onset
	if reads {
		run.ReadMBs = Round(Aggregate(window, hosts, readMBs), 2)
		onset = FirstSecond(ReadsAsWrites(ticks, reader), reader, hosts, steps, onS, q)
	} else {
		onset = FirstSecond(ticks, reader, hosts, steps, onS, q)
	}
	run.Onset = &onset
	if thr > 0 {
		x, y := HostSeries(ticks, reader, readWait)
		run.PctAbove, run.SettleS = Regulation(run.ThresholdMs, waits, x, y, steps, onS)
	}
	return run
}
