package throttle

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// liveMembers are the addresses in the delay line's live IPv4 set.
func liveMembers(t *testing.T, q *queueRules) []netip.Addr {
	t.Helper()
	r, err := q.nl.IpsetList(q.setName(4))
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, e := range r.Entries {
		a, _ := netip.AddrFromSlice(e.IP)
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// A change of a few members edits the live set, one message per member
// changed. An update interrupted midway (every step from the third on
// fails, the rebuild's too) is refused and leaves the old members whole;
// one whose patch fails once is undone and rebuilt, and ends with the
// new members.
func TestDelayLineUpdateAllOrNothing(t *testing.T) {
	l := newLab(t)
	d := l.delayLine(t)
	q := d.cls
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 233, 0, byte(i)}) }
	on := Setting{WriteDelay: time.Millisecond}
	old := map[netip.Addr]Setting{}
	for i := 1; i <= 20; i++ {
		old[addr(i)] = on
	}
	l.set(t, d, old) // from empty: rebuilt
	change := map[netip.Addr]Setting{addr(1): {}, addr(2): {}, addr(101): on, addr(102): on}
	var oldList []netip.Addr
	for i := 1; i <= 20; i++ {
		oldList = append(oldList, addr(i))
	}
	newList := slices.Concat(oldList[2:], []netip.Addr{addr(101), addr(102)})
	edits := q.edits
	for _, tc := range []struct {
		name    string
		fail    func(n int) bool // whether the nth step (from 0) fails
		err     bool
		want    []netip.Addr
		atLeast int // steps tried
	}{
		{"interrupted: refused, old set whole", func(n int) bool { return n >= 2 }, true, oldList, 3},
		{"patch fails once: rebuilt", func(n int) bool { return n == 2 }, false, newList, 3 + len(newList)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			q.edits = func(steps []ipsetStep) []error {
				errs := make([]error, len(steps))
				var pass []ipsetStep
				var at []int
				for i, s := range steps {
					if tc.fail(n) {
						errs[i] = errors.New("injected")
					} else {
						pass, at = append(pass, s), append(at, i)
					}
					n++
				}
				for k, err := range edits(pass) {
					errs[at[k]] = err
				}
				return errs
			}
			defer func() { q.edits = edits }()
			var err error
			l.t.Do(func() { err = d.Set(change) })
			if (err != nil) != tc.err || n < tc.atLeast {
				t.Fatalf("Set: %v after %d steps", err, n)
			}
			if got := liveMembers(t, q); !slices.Equal(got, tc.want) || !slices.Equal(q.members, tc.want) {
				t.Errorf("live set %v, recorded %v, want %v", got, q.members, tc.want)
			}
			if err != nil {
				if got := len(d.List()); got != len(old) {
					t.Errorf("%d settings after the refused update, want the old %d", got, len(old))
				}
			}
		})
	}
	// Back by four members: four steps, no rebuild.
	n := 0
	q.edits = func(steps []ipsetStep) []error { n += len(steps); return edits(steps) }
	defer func() { q.edits = edits }()
	back := map[netip.Addr]Setting{addr(1): on, addr(2): on, addr(101): {}, addr(102): {}}
	l.set(t, d, back)
	if got := liveMembers(t, q); n != 4 || !slices.Equal(got, oldList) {
		t.Errorf("%d steps to change 4 of 20, set %v; want 4, %v", n, got, oldList)
	}
}
