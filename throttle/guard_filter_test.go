package throttle

import "testing"

// hasFilter finds a filter by priority and handle; handle 0 asks for any
// filter of the priority.
func TestHasFilter(t *testing.T) {
	fs := []filterKey{{prio: 10, handle: 0}, {prio: 10, handle: 7}, {prio: 13, handle: 0}}
	for _, tc := range []struct {
		prio   uint16
		handle uint32
		want   bool
	}{
		{10, 7, true},
		{10, 0, true},
		{10, 8, false},
		{13, 0, true},
		{13, 7, false},
		{11, 0, false},
	} {
		if got := hasFilter(fs, tc.prio, tc.handle); got != tc.want {
			t.Errorf("hasFilter(prio %d, handle %d) = %v, want %v", tc.prio, tc.handle, got, tc.want)
		}
	}
}
