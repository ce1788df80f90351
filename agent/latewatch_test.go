package agent

import (
	"testing"

	"github.com/sanqos/sanqos/throttle"
)

// Successive cumulative readings of the delay line, as watchLateness sees
// them once a window: the warning starts and ends once each, and a window
// with too few releases changes nothing.
func TestLateWatch(t *testing.T) {
	over := len(throttle.LateBounds) - 2 // the 8 ms bucket: over 2 ms
	var cum throttle.Lateness
	add := func(onTime, late uint64) throttle.Lateness {
		cum.Counts[0] += onTime
		cum.Counts[over] += late
		cum.Count += onTime + late
		return cum
	}
	steps := []struct {
		name            string
		onTime, late    uint64
		warn, recovered bool
	}{
		{"on time", 1000, 5, false, false},
		{"starved", 990, 20, true, false},
		{"still starved: no second warning", 900, 50, false, false},
		{"too few to tell: the warning stands", 10, 0, false, false},
		{"on time again", 5000, 10, false, true},
		{"stays on time", 5000, 0, false, false},
		{"idle line", 0, 0, false, false},
	}
	var w lateWatch
	for _, s := range steps {
		v := w.check(add(s.onTime, s.late))
		if v.warn != s.warn || v.recovered != s.recovered {
			t.Errorf("%s: %+v, want warn %v recovered %v", s.name, v, s.warn, s.recovered)
		}
		if v.releases != s.onTime+s.late {
			t.Errorf("%s: %d releases in the window, want %d", s.name, v.releases, s.onTime+s.late)
		}
	}
}
