package report

import (
	"math"
	"testing"
)

// A class meets its objectives within the policy's 5 % below a
// throughput floor and at or below its latency ceiling; NaN: no
// objective of that kind.
func TestClassMet(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		iops, tput, lat float64
		want            bool
	}{
		{0, 0, 0, true},
		{-5, -5, -1, true},
		{-5.1, 0, 0, false},
		{0, -6, 0, false},
		{0, 0, 0.1, false},
		{nan, nan, nan, true},
		{nan, -2, nan, true},
	} {
		if got := ClassMet(tc.iops, tc.tput, tc.lat); got != tc.want {
			t.Errorf("ClassMet(%v, %v, %v) = %v, want %v", tc.iops, tc.tput, tc.lat, got, tc.want)
		}
	}
}
