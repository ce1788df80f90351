package agent

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// batchThrottle records each batch the actuator sends and fails the ones
// it is told to.
type batchThrottle struct {
	*throttle.Memory
	batches []map[netip.Addr]throttle.Setting
	fail    bool
}

func (b *batchThrottle) Set(s map[netip.Addr]throttle.Setting) error {
	b.batches = append(b.batches, maps.Clone(s))
	if b.fail {
		return errors.New("netlink: no buffer space")
	}
	return b.Memory.Set(s)
}

// actuate: the resources' wishes, one message at a time as the loops send
// them (a consumer on two saturated resources gets the larger delay of
// each kind and the tighter cap), become one batch of only what changed;
// a release clears what no resource still wants; a failed batch is
// applied in full at the next message; stopping clears everything.
func TestStageActuate(t *testing.T) {
	a, b := netip.MustParseAddr("10.99.0.3"), netip.MustParseAddr("10.99.0.4")
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type step struct {
		d     desire
		fail  bool
		batch map[netip.Addr]throttle.Setting // nil: no Set at all
	}
	for _, tc := range []struct {
		name  string
		steps []step
		stop  map[netip.Addr]throttle.Setting // the batch when the loops stop
	}{
		{"one resource, then the same again: one batch", []step{
			{d: desire{resource: "vg1", delays: map[netip.Addr]time.Duration{a: ms(10)}}, batch: map[netip.Addr]throttle.Setting{a: {WriteDelay: ms(10)}}},
			{d: desire{resource: "vg1", delays: map[netip.Addr]time.Duration{a: ms(10)}}},
		}, map[netip.Addr]throttle.Setting{a: {}}},
		{"two resources: the larger delay of each kind, the tighter cap", []step{
			{d: desire{resource: "vg1", delays: map[netip.Addr]time.Duration{a: ms(10)}, other: map[netip.Addr]throttle.Setting{b: {ReadDelay: ms(5), WriteRate: 4 << 20}}},
				batch: map[netip.Addr]throttle.Setting{a: {WriteDelay: ms(10)}, b: {ReadDelay: ms(5), WriteRate: 4 << 20}}},
			{d: desire{resource: "vg2", delays: map[netip.Addr]time.Duration{a: ms(4)}, other: map[netip.Addr]throttle.Setting{b: {ReadDelay: ms(8), WriteRate: 2 << 20}}},
				batch: map[netip.Addr]throttle.Setting{b: {ReadDelay: ms(8), WriteRate: 2 << 20}}},
			{d: desire{resource: "vg2"}, batch: map[netip.Addr]throttle.Setting{b: {ReadDelay: ms(5), WriteRate: 4 << 20}}},
		}, map[netip.Addr]throttle.Setting{a: {}, b: {}}},
		{"a release clears what nobody wants", []step{
			{d: desire{resource: "vg1", delays: map[netip.Addr]time.Duration{a: ms(10), b: ms(2)}}, batch: map[netip.Addr]throttle.Setting{a: {WriteDelay: ms(10)}, b: {WriteDelay: ms(2)}}},
			{d: desire{resource: "vg1", delays: map[netip.Addr]time.Duration{a: ms(12)}}, batch: map[netip.Addr]throttle.Setting{a: {WriteDelay: ms(12)}, b: {}}},
			{d: desire{resource: "vg1"}, batch: map[netip.Addr]throttle.Setting{a: {}}},
		}, nil},
		{"a failed batch is sent whole at the next message", []step{
			{d: desire{resource: "vg1", delays: map[netip.Addr]time.Duration{a: ms(10)}}, fail: true, batch: map[netip.Addr]throttle.Setting{a: {WriteDelay: ms(10)}}},
			{d: desire{resource: "vg2", delays: map[netip.Addr]time.Duration{b: ms(3)}}, batch: map[netip.Addr]throttle.Setting{a: {WriteDelay: ms(10)}, b: {WriteDelay: ms(3)}}},
		}, map[netip.Addr]throttle.Setting{a: {}, b: {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := &batchThrottle{Memory: throttle.NewMemory()}
			l := NewLoops(LoopConfig{}, nil, th, slog.New(slog.NewTextHandler(io.Discard, nil)))
			act := newActuator()
			fails := uint64(0)
			for k, s := range tc.steps {
				th.fail, th.batches = s.fail, nil
				act.put(s.d)
				l.apply(act)
				checkBatch(t, k, th.batches, s.batch)
				if s.fail {
					fails++
				}
			}
			if l.ApplyErrors() != fails {
				t.Errorf("%d apply errors counted, want %d", l.ApplyErrors(), fails)
			}
			th.fail, th.batches = false, nil
			act.releaseAll()
			l.apply(act)
			checkBatch(t, len(tc.steps), th.batches, tc.stop)
			if left := th.List(); len(left) != 0 {
				t.Errorf("after stopping, still throttled: %v", left)
			}
		})
	}
}

// checkBatch asserts the actuator sent exactly want (nil: nothing).
func checkBatch(t *testing.T, k int, got []map[netip.Addr]throttle.Setting, want map[netip.Addr]throttle.Setting) {
	t.Helper()
	switch {
	case want == nil && len(got) != 0:
		t.Errorf("message %d: sent %v, want nothing (no change)", k, got)
	case want != nil && (len(got) != 1 || !maps.Equal(got[0], want)):
		t.Errorf("message %d: sent %v, want one batch %v", k, got, want)
	}
}
