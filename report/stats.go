// Package report turns recorded traces into the figures operators read:
// summary statistics (percentiles, fairness, regressions, t-tests) and PNG
// plots in the style of the thesis' figures, plus the HTML page of a run.
//
// It reads traces and writes files under a run's results directory; it
// never touches the kernel, the lab or the agent.
//
// Imports (sanqos): internal/quantile, sample.
package report

import (
	"math"
	"sort"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/sanqos/sanqos/internal/quantile"
)

// Dist summarises a sample of milliseconds; NaN values are ignored.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Describe computes Dist over xs (NaNs dropped). Its percentiles
// interpolate linearly (R type 7, numpy's default), so figures match what
// an analyst recomputes from the CSV; the agent's own p95 is another
// method, for the reason agent/objective.go gives.
func Describe(xs []float64) Dist {
	v := finite(xs)
	if len(v) == 0 {
		return Dist{}
	}
	sort.Float64s(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return Dist{N: len(v), Mean: sum / float64(len(v)), P50: quantile.Of(v, 0.5, quantile.Linear), P95: quantile.Of(v, 0.95, quantile.Linear), P99: quantile.Of(v, 0.99, quantile.Linear), Max: v[len(v)-1]}
}

func finite(xs []float64) []float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	return v
}

// Jain's fairness index: 1 when all equal, 1/n when one takes everything.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return math.NaN()
	}
	return s * s / (float64(len(xs)) * s2)
}

// MeanStderr returns the mean and standard error of the mean.
func MeanStderr(xs []float64) (mean, stderr float64) {
	switch len(xs) {
	case 0:
		return math.NaN(), math.NaN()
	case 1:
		return xs[0], 0
	}
	// The mean is summed in order (gonum's Sum adds in another, and can
	// differ in the last bit): the simulator's summaries print it.
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	return mean, stat.StdDev(xs, nil) / math.Sqrt(float64(len(xs)))
}

// LinearFit fits y = a + b·x by least squares and returns R² (1 where y
// is constant, NaN where x is).
func LinearFit(x, y []float64) (a, b, r2 float64) {
	if len(x) < 2 || stat.Variance(x, nil) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	a, b = stat.LinearRegression(x, y, nil, false)
	if stat.Variance(y, nil) == 0 {
		return a, b, 1
	}
	return a, b, stat.RSquared(x, y, nil, a, b)
}

// Welch is the result of Welch's two-sample t-test on the difference of
// means (b − a).
type Welch struct {
	Diff  float64    `json:"diff"`
	T     float64    `json:"t"`
	DF    float64    `json:"df"`
	P     float64    `json:"p"`
	CI    [2]float64 `json:"ci"`
	Level float64    `json:"level"`
	MeanA float64    `json:"mean_a"`
	MeanB float64    `json:"mean_b"`
}

// WelchTest compares two samples with unequal variances, as R's t.test
// does by default (the thesis' §5.8 used R), with a two-sided CI at level.
func WelchTest(a, b []float64, level float64) Welch {
	ma, sea := MeanStderr(a)
	mb, seb := MeanStderr(b)
	va, vb := sea*sea, seb*seb
	w := Welch{Diff: mb - ma, MeanA: ma, MeanB: mb, Level: level}
	se := math.Sqrt(va + vb)
	if se == 0 {
		w.CI = [2]float64{w.Diff, w.Diff}
		w.P = 1
		return w
	}
	na, nb := float64(len(a)), float64(len(b))
	w.DF = (va + vb) * (va + vb) / (va*va/(na-1) + vb*vb/(nb-1))
	w.T = w.Diff / se
	st := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: w.DF}
	w.P = 2 * (1 - st.CDF(math.Abs(w.T)))
	q := st.Quantile(1 - (1-level)/2)
	w.CI = [2]float64{w.Diff - q*se, w.Diff + q*se}
	return w
}

// PairedT is a one-sample t-test on paired differences (b − a per pair),
// with a two-sided CI at level. Pairing removes what the two members of a
// pair share (here: the machine's slow drift), which on a shared 2-core VM
// is most of the run-to-run variance.
func PairedT(diffs []float64, level float64) Welch {
	m, se := MeanStderr(diffs)
	w := Welch{Diff: m, Level: level, DF: float64(len(diffs) - 1)}
	if se == 0 || len(diffs) < 2 {
		w.CI = [2]float64{m, m}
		w.P = 1
		return w
	}
	w.T = m / se
	st := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: w.DF}
	w.P = 2 * (1 - st.CDF(math.Abs(w.T)))
	q := st.Quantile(1 - (1-level)/2)
	w.CI = [2]float64{m - q*se, m + q*se}
	return w
}
