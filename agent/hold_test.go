package agent

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// TestIdleHold: a consumer slowed while it moved data keeps its last
// active delays while idle (whatever the releasing controller asks), and
// for holdResume ticks after it resumes the larger of those and the
// policy's; then the policy decides. It is let go after idle_hold, when
// the policy releases it while it still moves data, and when it comes
// back light.
func TestIdleHold(t *testing.T) {
	const hold = time.Second
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	w := func(v float64) throttle.Setting { return throttle.Setting{WriteDelay: ms(v)} }
	type tick struct {
		bps  float64 // read + write this tick
		ask  throttle.Setting
		want throttle.Setting
	}
	const busy, quiet = 8e6, 0
	for _, tc := range []struct {
		name  string
		ticks []tick
	}{
		{"a load step ends and the next starts slowed", []tick{
			{busy, w(20), w(20)},
			{busy, w(22), w(22)},
			{quiet, w(5), w(22)}, // the controller releases: nothing flows
			{quiet, w(0), w(22)},
			{busy, w(0), w(22)}, // resumed, before the set re-forms
			{busy, w(1), w(22)},
			{busy, w(25), w(25)}, // the preload asks more: the larger
			{busy, w(24), w(24)}, // past holdResume: the policy's
			{quiet, w(0), w(24)}, // and that is the level held next
		}},
		{"a read delay is held as a write delay is", []tick{
			{busy, throttle.Setting{ReadDelay: ms(9), WriteDelay: ms(1)}, throttle.Setting{ReadDelay: ms(9), WriteDelay: ms(1)}},
			{quiet, throttle.Setting{}, throttle.Setting{ReadDelay: ms(9), WriteDelay: ms(1)}},
			{busy, throttle.Setting{WriteDelay: ms(4)}, throttle.Setting{ReadDelay: ms(9), WriteDelay: ms(4)}},
		}},
		{"rate caps are not held", []tick{
			{busy, throttle.Setting{WriteDelay: ms(90), WriteRate: 1e6}, throttle.Setting{WriteDelay: ms(90), WriteRate: 1e6}},
			{quiet, throttle.Setting{}, w(90)},
		}},
		{"idle past idle_hold is released", append(append([]tick{{busy, w(20), w(20)}},
			slices.Repeat([]tick{{quiet, w(0), w(20)}}, 10)...), // 10 × 100 ms = hold
			tick{quiet, w(0), w(0)},
			tick{busy, w(0), w(0)})},
		{"released by the policy while moving data: nothing to hold", []tick{
			{busy, w(20), w(20)},
			{busy, w(0), w(0)},
			{quiet, w(0), w(0)},
			{busy, w(0), w(0)},
		}},
		{"back light: let go after holdResume ticks", append([]tick{
			{busy, w(20), w(20)},
			{quiet, w(0), w(20)}},
			append(slices.Repeat([]tick{{5e5, w(0), w(20)}}, holdResume), tick{5e5, w(0), w(0)}, tick{quiet, w(0), w(0)})...)},
		{"never slowed: nothing held", []tick{
			{busy, w(0), w(0)},
			{quiet, w(0), w(0)},
		}},
		{"slowed only while idle: nothing held", []tick{
			{quiet, w(3), w(3)},
			{quiet, w(0), w(0)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := holds{}
			c := ConsumerInput{Addr: netip.MustParseAddr("10.99.0.3")}
			for i, k := range tc.ticks {
				c.WriteBps = k.bps
				got := h.apply(c, k.ask, 100*time.Millisecond, hold)
				h.record(c, got)
				h.prune()
				if got != k.want {
					t.Errorf("tick %d (%.0f B/s, ask %+v): got %+v, want %+v", i, k.bps, k.ask, got, k.want)
				}
			}
		})
	}
}

// TestIdleHoldPrune: a held consumer that leaves the resource's input
// (logged out) is forgotten, and one that stays is kept.
func TestIdleHoldPrune(t *testing.T) {
	h := holds{}
	a, b := ConsumerInput{Addr: netip.MustParseAddr("10.99.0.3"), WriteBps: 8e6}, ConsumerInput{Addr: netip.MustParseAddr("10.99.0.4"), WriteBps: 8e6}
	for _, c := range []ConsumerInput{a, b} {
		h.record(c, h.apply(c, throttle.Setting{WriteDelay: 20 * time.Millisecond}, 100*time.Millisecond, time.Minute))
	}
	h.prune()
	a.WriteBps = 0
	h.apply(a, throttle.Setting{}, 100*time.Millisecond, time.Minute) // b has gone
	h.prune()
	if _, ok := h[a.Addr]; !ok || len(h) != 1 {
		t.Errorf("holds %v, want only %s", h, a.Addr)
	}
}

// The shape stage holds the writers' delays when they stop and the
// policy asks nothing (its output nil), the resource still asks them, and
// their status rows say held; with idle_hold 0 they are released.
func TestStageShapeHoldsIdleWriters(t *testing.T) {
	for _, hold := range []time.Duration{30 * time.Second, 0} {
		l, rs, st, out := decidedAt(t, "testdata/stages/writers-baseline.csv", 7.4, 20)
		l.cfg.IdleHold = hold
		l.shape(rs, &out) // slowed while writing
		for k := range rs.in.Consumers {
			rs.in.Consumers[k].ReadBps, rs.in.Consumers[k].WriteBps = 0, 0 // the load step ends
		}
		idleOut := PolicyOutput{}
		l.shape(rs, &idleOut)
		l.publish(rs, "vg1", &st)
		pub := l.Status()[0]
		for _, h := range stageHosts {
			a := stageAddr[h]
			want := interferer(h, throttle.Setting{WriteDelay: 10 * time.Millisecond})
			if hold == 0 {
				want = throttle.Setting{}
			}
			if got := rs.asked[a]; got != want {
				t.Errorf("idle_hold %v, %s: the resource asks %+v, want %+v", hold, h, got, want)
			}
			row := pub.Consumers[slices.IndexFunc(pub.Consumers, func(c ConsumerStatus) bool { return c.Addr == a.String() })]
			if row.Held != !want.IsZero() || row.Setting != want {
				t.Errorf("idle_hold %v, %s: row held %v with %+v, want %v with %+v", hold, h, row.Held, row.Setting, !want.IsZero(), want)
			}
		}
	}
}
