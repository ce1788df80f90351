package report

import (
	"errors"
	"testing"
)

func TestSmallestHolding(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		from    int // holds from here on (> max: never)
		want    int
		wantOK  bool
		maxAsks int
	}{
		{"holds from the middle", 80, 33, 33, true, 9},
		{"holds at once", 80, 0, 0, true, 2},
		{"only the maximum", 80, 80, 80, true, 9},
		{"never", 80, 81, 80, false, 1},
		{"one step", 1, 1, 1, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asks := 0
			k, ok, err := SmallestHolding(tc.max, func(k int) (bool, error) { asks++; return k >= tc.from, nil })
			if err != nil || k != tc.want || ok != tc.wantOK || asks > tc.maxAsks {
				t.Errorf("got %d %v %v after %d asks, want %d %v within %d", k, ok, err, asks, tc.want, tc.wantOK, tc.maxAsks)
			}
		})
	}
	boom := errors.New("probe failed")
	if _, _, err := SmallestHolding(80, func(k int) (bool, error) { return k > 40, map[bool]error{true: boom}[k == 40] }); err != boom {
		t.Errorf("a failed probe's error was %v, want it returned", err)
	}
}
