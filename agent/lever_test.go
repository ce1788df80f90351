package agent

import (
	"maps"
	"math"
	"net/netip"
	"testing"
	"time"
)

// near compares caps to the byte/s ± 1 kB/s (float sums).
func near(x, y uint64) bool { return max(x, y)-min(x, y) <= 1000 }

func TestRateLeverCaps(t *testing.T) {
	a, b, c, d := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")
	rates := map[netip.Addr]float64{a: 6e6, b: 4e6, c: 2e6, d: 1e6}
	rate := func(x netip.Addr) float64 { return rates[x] }
	writers := []netip.Addr{c, a, b}
	for _, tc := range []struct {
		name string
		k, n int
		want map[netip.Addr]uint64
	}{
		// 12 MB/s in all. k=1 of 10 keeps 91 %: 10.92 MB/s; c and b fit
		// under the level, a takes the rest.
		{"the heaviest is capped first", 1, 10, map[netip.Addr]uint64{a: 4.92e6}},
		// 55 %: 6.6 MB/s; c (2) fits, a and b share 4.6.
		{"then the next, to one level", 5, 10, map[netip.Addr]uint64{a: 2.3e6, b: 2.3e6}},
		// The top keeps 10 %: 1.2 MB/s, 0.4 each.
		{"at the top everyone is capped", 10, 10, map[netip.Addr]uint64{a: 4e5, b: 4e5, c: 4e5}},
		{"past the top is the top", 15, 10, map[netip.Addr]uint64{a: 4e5, b: 4e5, c: 4e5}},
	} {
		var l rateLever
		got := l.caps(tc.k, tc.n, writers, rate)
		if !maps.EqualFunc(got, tc.want, near) {
			t.Errorf("%s: caps %v, want %v", tc.name, got, tc.want)
		}
	}

	// The reference is the writers' rate when the delay ran out, not the
	// rate they have under a cap, and a writer joining later comes in at
	// its current rate.
	var l rateLever
	l.observeMax([]netip.Addr{a, b}, rate)
	rates[a], rates[b] = 1e6, 1e6 // as capped
	got := l.caps(5, 10, []netip.Addr{a, b, d}, rate)
	// Reference 6 + 4 + 1 = 11 MB/s; 55 % = 6.05: d (1) fits, a and b
	// share 5.05.
	if want := (map[netip.Addr]uint64{a: 2.525e6, b: 2.525e6}); !maps.EqualFunc(got, want, near) {
		t.Errorf("caps %v, want %v", got, want)
	}
	l.reset()
	if l.ref != nil || l.atMax == nil {
		t.Fatal("reset must forget the reference but keep the rates at the maximum delay")
	}
}

// A cap falls to at most capRamp of the last one per tick (the writer's
// srtt must follow the queue it adds), starting from the writer's
// reference rate, and loosens at once.
func TestRateLeverRamp(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	rates := map[netip.Addr]float64{a: 6e6, b: 2e6}
	rate := func(x netip.Addr) float64 { return rates[x] }
	writers := []netip.Addr{a, b}
	l := rateLever{ramp: capRampPer(100 * time.Millisecond)}
	// The top of the range keeps 10 % of 8 MB/s: 0.4 MB/s each.
	for i, want := range []map[netip.Addr]uint64{
		{a: 4.2e6, b: 1.4e6},
		{a: 2.94e6, b: 0.98e6},
		{a: 2.058e6, b: 0.686e6},
		{a: 1.4406e6, b: 0.4802e6},
		{a: 1.00842e6, b: 0.4e6},
	} {
		if got := l.caps(20, 20, writers, rate); !maps.EqualFunc(got, want, near) {
			t.Fatalf("tick %d at the top: caps %v, want %v", i+1, got, want)
		}
	}
	// Back to 91 % (7.28 MB/s): b fits, a gets 5.28 at once.
	if got, want := l.caps(2, 20, writers, rate), (map[netip.Addr]uint64{a: 5.28e6}); !maps.EqualFunc(got, want, near) {
		t.Fatalf("loosened: caps %v, want %v", got, want)
	}
	// b, uncapped a tick, ramps from its reference again.
	if got, want := l.caps(20, 20, writers, rate), (map[netip.Addr]uint64{a: 3.696e6, b: 1.4e6}); !maps.EqualFunc(got, want, near) {
		t.Fatalf("capped again: caps %v, want %v", got, want)
	}
	if r := capRampPer(time.Second); math.Abs(r-math.Pow(0.7, 10)) > 1e-12 {
		t.Errorf("a 1 s tick ramps by %v, want 0.7^10", r)
	}
}

func TestFloorEstimate(t *testing.T) {
	var f floorEstimate
	for i := 0; i < floorMinimum-1; i++ {
		f.observe(6)
		if _, ok := f.value(); ok {
			t.Fatalf("floor known after %d samples", i+1)
		}
	}
	f.observe(math.NaN())
	f.observe(6)
	if v, ok := f.value(); !ok || v != 6 {
		t.Fatalf("floor %v %v, want 6 true", v, ok)
	}
}
