package quantile

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Known answers: R's quantile(x, type = 7) and type = 1 of 1..10.
func TestKnownAnswers(t *testing.T) {
	x := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q            float64
		linear, rank float64
	}{
		{0, 1, 1}, {0.5, 5.5, 5}, {0.95, 9.55, 10}, {0.99, 9.91, 10}, {1, 10, 10}, {0.1, 1.9, 1},
	} {
		if got := Of(x, c.q, Linear); math.Abs(got-c.linear) > 1e-12 {
			t.Errorf("linear q=%v: %v, want %v", c.q, got, c.linear)
		}
		if got := Of(x, c.q, NearestRank); got != c.rank {
			t.Errorf("nearest rank q=%v: %v, want %v", c.q, got, c.rank)
		}
	}
	if !math.IsNaN(Of(nil, 0.95, Linear)) || !math.IsNaN(Of(nil, 0.95, NearestRank)) {
		t.Error("empty sample: want NaN")
	}
}

// The two definitions this package replaced, as they were written:
// report.Quantile and the agent's tail estimate (n ≥ 1). Of must give
// exactly their values, bit for bit, since the simulator's figures are
// byte-identical for a seed.
func TestSameAsTheCodeItReplaced(t *testing.T) {
	reportQuantile := func(sorted []float64, q float64) float64 {
		h := (float64(len(sorted)) - 1) * q
		lo := math.Floor(h)
		i := int(lo)
		if i+1 >= len(sorted) {
			return sorted[len(sorted)-1]
		}
		return sorted[i] + (h-lo)*(sorted[i+1]-sorted[i])
	}
	agentP95 := func(s []float64) float64 {
		return s[min(len(s)-1, int(math.Ceil(0.95*float64(len(s))))-1)]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 1300; n++ {
		x := make([]float64, n)
		for i := range x {
			x[i] = rng.ExpFloat64()
		}
		slices.Sort(x)
		if a, b := Of(x, 0.95, NearestRank), agentP95(x); a != b {
			t.Fatalf("n=%d: nearest rank %v, the agent's %v", n, a, b)
		}
		for _, q := range []float64{0.5, 0.95, 0.99} {
			if a, b := Of(x, q, Linear), reportQuantile(x, q); a != b {
				t.Fatalf("n=%d q=%v: linear %v, report's %v", n, q, a, b)
			}
		}
	}
}
