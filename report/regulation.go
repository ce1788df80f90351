package report

import "math"

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
