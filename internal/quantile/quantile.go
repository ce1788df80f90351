// Package quantile is the one definition of a sample's quantiles in
// sanqos, so that the controller's p95 and the reports' p95 are computed
// by one piece of code, each naming the method it uses and why.
//
// Imports (sanqos): none.
package quantile

import "math"

// Method is how a quantile falls between two observed values.
type Method int

const (
	// Linear interpolates between the two nearest ranks (R type 7,
	// numpy's default). It is the p95 every published figure uses
	// (report.Describe: summary.json, README, BENCHMARKS), because it is
	// what an analyst recomputes from a trace's CSV.
	Linear Method = iota
	// NearestRank is the smallest observed value with at least a fraction
	// q of the sample at or below it (R type 1): always a value that was
	// seen. The agent's tail estimate uses it (see agent/objective.go).
	NearestRank
)

// Of is the q-quantile (0 ≤ q ≤ 1) of sorted, which must be in ascending
// order, by method m; NaN for an empty sample.
func Of(sorted []float64, q float64, m Method) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if m == NearestRank {
		return sorted[min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)]
	}
	h := (float64(n) - 1) * q
	lo := math.Floor(h)
	i := int(lo)
	if i+1 >= n {
		return sorted[n-1]
	}
	return sorted[i] + (h-lo)*(sorted[i+1]-sorted[i])
}
