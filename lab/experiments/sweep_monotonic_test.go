package experiments

import "testing"

// The many-stream sweep passes a flat-then-falling rate and fails a rate
// that rises with the delay; its knee is the first delay under 90 % of
// the undelayed rate.
func TestJudgeMonotonic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mbs   []float64 // at 0, 5, 10, 20, 40 ms
		pass  bool
		knee  float64
		stder float64
	}{
		{"flat, then falling (twelve readers on a saturated disk)", []float64{28, 28.4, 27.9, 24, 11}, true, 20, 0},
		{"falling from the first step (one stream)", []float64{30, 20, 14, 9, 5}, true, 5, 0},
		{"flat throughout: the delay never reaches the knee", []float64{28, 28, 28.2, 27.9, 28.1}, true, 0, 0},
		{"a rise after a fall is a larger delay slowing less", []float64{28, 20, 27, 24, 11}, false, 5, 0},
		{"a rise within two standard errors is noise", []float64{28, 20, 22, 18, 11}, true, 5, 1.5},
	} {
		s := newSweepSummary("delay-sweep", "test")
		s.Streams = 12
		for i, d := range []float64{0, 5, 10, 20, 40} {
			s.Points = append(s.Points, SweepPoint{Direction: "read", DelayMs: d, MBs: tc.mbs[i], Stderr: tc.stder})
		}
		s.judgeMonotonic("read")
		if s.Criterion.Pass["read"] != tc.pass || s.Criterion.KneeMs["read"] != tc.knee {
			t.Errorf("%s: pass %v knee %v, want %v and %v", tc.name, s.Criterion.Pass["read"], s.Criterion.KneeMs["read"], tc.pass, tc.knee)
		}
	}
}
