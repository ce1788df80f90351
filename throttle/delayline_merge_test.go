package throttle

import (
	"net/netip"
	"slices"
	"testing"
)

// merged is the members after an update's adds and deletes, sorted, in
// one pass: whatever their interleaving, and a delete of a non-member or
// an add of a member changes nothing.
func TestMerged(t *testing.T) {
	a := func(xs ...int) []netip.Addr {
		var out []netip.Addr
		for _, x := range xs {
			out = append(out, netip.AddrFrom4([4]byte{10, 0, 0, byte(x)}))
		}
		return out
	}
	for _, tc := range []struct {
		name                 string
		members, add, del, w []netip.Addr
	}{
		{"from empty", nil, a(1, 2), nil, a(1, 2)},
		{"to empty", a(1, 2), nil, a(1, 2), nil},
		{"interleaved", a(2, 4, 6, 8), a(1, 5, 9), a(4, 8), a(1, 2, 5, 6, 9)},
		{"delete a non-member", a(2, 4), nil, a(3), a(2, 4)},
		{"add a member", a(2, 4), a(4), nil, a(2, 4)},
		{"IPv6 after IPv4", a(1), []netip.Addr{netip.MustParseAddr("fd00::1")}, nil, append(a(1), netip.MustParseAddr("fd00::1"))},
	} {
		if got := merged(tc.members, tc.add, tc.del); !slices.Equal(got, tc.w) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.w)
		}
	}
}
