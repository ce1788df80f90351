package throttle

import (
	"testing"
	"time"
)

func TestRamp(t *testing.T) {
	ms := func(f float64) int64 { return int64(f * float64(time.Millisecond)) }
	type step struct {
		at, target, want float64 // ms
	}
	cases := []struct {
		name  string
		rate  float64
		steps []step
	}{
		{"no ramp: steps at once", 0, []step{{0, 0, 0}, {1, 12, 12}, {2, 3, 3}}},
		{"grows rate × traffic time", 0.5, []step{{0, 0, 0}, {1, 12, 0.5}, {2, 12, 1}, {3, 12, 1.5}}},
		{"reaches the setting and holds", 0.5, []step{{0, 0, 0}, {1, 1, 0.5}, {2, 1, 1}, {3, 1, 1}}},
		{"decreases at once", 0.5, []step{{0, 0, 0}, {1, 2, 0.5}, {2, 0.2, 0.2}, {3, 0, 0}}},
		// Idle time counts only up to rampGap: the sender's srtt did not
		// move while it sent nothing.
		{"a pause does not count", 0.5, []step{{0, 0, 0}, {1000, 20, 1}, {1001, 20, 1.5}}},
		{"from a held delay, not from zero", 1, []step{{0, 10, 10}, {0.5, 30, 10.5}, {1.5, 30, 11.5}}},
		{"rises again after a fall", 1, []step{{0, 8, 8}, {1, 2, 2}, {2, 8, 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r ramp
			if c.steps[0].target > 0 {
				r.eff = ms(c.steps[0].target) // a consumer already at its delay
			}
			for _, s := range c.steps {
				if got := r.next(ms(s.target), ms(s.at), c.rate); got != ms(s.want) {
					t.Fatalf("at %v ms toward %v ms: %v ms, want %v", s.at, s.target, float64(got)/1e6, s.want)
				}
			}
		})
	}
}
