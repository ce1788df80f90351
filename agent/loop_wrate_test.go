package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

func TestMinCap(t *testing.T) {
	for _, c := range []struct{ a, b, want uint64 }{
		{0, 0, 0}, {0, 5, 5}, {5, 0, 5}, {3, 5, 3}, {5, 3, 3},
	} {
		if got := minCap(c.a, c.b); got != c.want {
			t.Errorf("minCap(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// Two resources capping the same writer: the smaller write cap wins, and
// a write cap alone is a setting of its own (not a write delay).
func TestActuatorMergesWriteRates(t *testing.T) {
	w := netip.MustParseAddr("10.99.0.3")
	a := newActuator()
	a.put(desire{resource: "vg1", delays: map[netip.Addr]time.Duration{}, other: map[netip.Addr]throttle.Setting{w: {WriteRate: 8 << 20}}})
	a.put(desire{resource: "vg2", delays: map[netip.Addr]time.Duration{}, other: map[netip.Addr]throttle.Setting{w: {WriteRate: 4 << 20, Rate: 1 << 20}}})
	merged, batch := a.diff()
	if want := (throttle.Setting{WriteRate: 4 << 20, Rate: 1 << 20}); merged[w] != want || batch[w] != want {
		t.Errorf("merged %v batch %v", merged, batch)
	}
}
