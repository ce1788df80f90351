package experiments

import "testing"

// The writers' block size follows a slower modelled disk down in powers of
// two, so one write holds the group about as long as on the default.
func TestScaledBS(t *testing.T) {
	for _, tc := range []struct {
		bw, def float64
		want    int
	}{
		{40e6, 40e6, 64 << 10},
		{80e6, 40e6, 64 << 10}, // faster: unchanged
		{0, 40e6, 64 << 10},    // unset
		{20e6, 40e6, 32 << 10},
		{4e6, 40e6, 8 << 10}, // the guest: 6.4 KiB → 8 KiB
		{1e5, 40e6, 4 << 10}, // floor
	} {
		if got := scaledBS(64<<10, tc.bw, tc.def); got != tc.want {
			t.Errorf("scaledBS(64K, %v, %v) = %d, want %d", tc.bw, tc.def, got, tc.want)
		}
	}
}
