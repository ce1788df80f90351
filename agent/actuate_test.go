package agent

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"strings"
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

// actuate: each tick, the resources' wishes (a consumer on two
// saturated resources gets the larger delay of each kind and the tighter
// cap) become one batch of only what changed; what no resource still
// wants is cleared; a failed batch is sent whole at the next tick;
// Release clears everything.
func TestStageActuate(t *testing.T) {
	a, b := netip.MustParseAddr("10.99.0.3"), netip.MustParseAddr("10.99.0.4")
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type wish = map[netip.Addr]throttle.Setting
	type tick struct {
		wishes []wish // one per resource
		fail   bool
		batch  wish // nil: no Set at all
	}
	for _, tc := range []struct {
		name  string
		ticks []tick
		stop  wish // the batch at release
	}{
		{"one resource, then the same again: one batch", []tick{
			{wishes: []wish{{a: {WriteDelay: ms(10)}}}, batch: wish{a: {WriteDelay: ms(10)}}},
			{wishes: []wish{{a: {WriteDelay: ms(10)}}}},
		}, wish{a: {}}},
		{"two resources: the larger delay of each kind, the tighter cap", []tick{
			{wishes: []wish{{a: {WriteDelay: ms(10)}, b: {ReadDelay: ms(5), WriteRate: 4 << 20}}},
				batch: wish{a: {WriteDelay: ms(10)}, b: {ReadDelay: ms(5), WriteRate: 4 << 20}}},
			{wishes: []wish{{a: {WriteDelay: ms(10)}, b: {ReadDelay: ms(5), WriteRate: 4 << 20}}, {a: {WriteDelay: ms(4)}, b: {ReadDelay: ms(8), WriteRate: 2 << 20}}},
				batch: wish{b: {ReadDelay: ms(8), WriteRate: 2 << 20}}},
			{wishes: []wish{{a: {WriteDelay: ms(10)}, b: {ReadDelay: ms(5), WriteRate: 4 << 20}}, {}},
				batch: wish{b: {ReadDelay: ms(5), WriteRate: 4 << 20}}},
		}, wish{a: {}, b: {}}},
		{"what nobody wants is cleared", []tick{
			{wishes: []wish{{a: {WriteDelay: ms(10)}, b: {WriteDelay: ms(2)}}}, batch: wish{a: {WriteDelay: ms(10)}, b: {WriteDelay: ms(2)}}},
			{wishes: []wish{{a: {WriteDelay: ms(12)}}}, batch: wish{a: {WriteDelay: ms(12)}, b: {}}},
			{wishes: []wish{{}}, batch: wish{a: {}}},
		}, nil},
		{"a failed batch is sent whole at the next tick", []tick{
			{wishes: []wish{{a: {WriteDelay: ms(10)}}}, fail: true, batch: wish{a: {WriteDelay: ms(10)}}},
			{wishes: []wish{{a: {WriteDelay: ms(10)}}, {b: {WriteDelay: ms(3)}}}, batch: wish{a: {WriteDelay: ms(10)}, b: {WriteDelay: ms(3)}}},
		}, wish{a: {}, b: {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := &batchThrottle{Memory: throttle.NewMemory()}
			l := NewLoops(LoopConfig{}, nil, th, slog.New(slog.NewTextHandler(io.Discard, nil)))
			act := newActuator()
			fails := uint64(0)
			for k, s := range tc.ticks {
				th.fail, th.batches = s.fail, nil
				l.apply(&act, merge(nil, s.wishes))
				checkBatch(t, k, th.batches, s.batch)
				if s.fail {
					fails++
				}
			}
			if l.ApplyErrors() != fails {
				t.Errorf("%d apply errors counted, want %d", l.ApplyErrors(), fails)
			}
			th.fail, th.batches = false, nil
			l.apply(&act, nil)
			checkBatch(t, len(tc.ticks), th.batches, tc.stop)
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
		t.Errorf("tick %d: sent %v, want nothing (no change)", k, got)
	case want != nil && (len(got) != 1 || !maps.Equal(got[0], want)):
		t.Errorf("tick %d: sent %v, want one batch %v", k, got, want)
	}
}

// v4Throttle throttles IPv4 consumers only and names the IPv6 ones it is
// asked to throttle in a RefusedError, as edt does on a kernel that
// refused its IPv6 program.
type v4Throttle struct {
	*throttle.Memory
	batches []map[netip.Addr]throttle.Setting
}

func (v *v4Throttle) Set(s map[netip.Addr]throttle.Setting) error {
	v.batches = append(v.batches, maps.Clone(s))
	ok, refused := map[netip.Addr]throttle.Setting{}, map[netip.Addr]error{}
	for a, x := range s {
		if a.Is6() && !x.IsZero() {
			refused[a] = throttle.ErrUnsupported
		} else {
			ok[a] = x
		}
	}
	if err := v.Memory.Set(ok); err != nil {
		return err
	}
	if len(refused) > 0 {
		return &throttle.RefusedError{Backend: "v4", Consumers: refused}
	}
	return nil
}

// An IPv6 consumer the backend cannot throttle never holds back the
// IPv4 ones: they are applied and not sent again, the IPv6 one is
// retried alone each tick, counted each time and logged once, and a
// release clears only what was applied.
func TestStageActuateRefusedConsumer(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.99.0.3"), netip.MustParseAddr("fd00::3")
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	th := &v4Throttle{Memory: throttle.NewMemory()}
	var logged strings.Builder
	l := NewLoops(LoopConfig{}, nil, th, slog.New(slog.NewTextHandler(&logged, nil)))
	act := newActuator()
	write := func(w map[netip.Addr]time.Duration) map[netip.Addr]throttle.Setting {
		out := map[netip.Addr]throttle.Setting{}
		for a, d := range w {
			out[a] = throttle.Setting{WriteDelay: d}
		}
		return out
	}
	for k, s := range []struct {
		delays map[netip.Addr]time.Duration
		batch  map[netip.Addr]throttle.Setting
	}{
		{map[netip.Addr]time.Duration{v4: ms(10), v6: ms(10)}, map[netip.Addr]throttle.Setting{v4: {WriteDelay: ms(10)}, v6: {WriteDelay: ms(10)}}},
		{map[netip.Addr]time.Duration{v4: ms(10), v6: ms(10)}, map[netip.Addr]throttle.Setting{v6: {WriteDelay: ms(10)}}},
		{map[netip.Addr]time.Duration{v4: ms(12), v6: ms(10)}, map[netip.Addr]throttle.Setting{v4: {WriteDelay: ms(12)}, v6: {WriteDelay: ms(10)}}},
	} {
		th.batches = nil
		l.apply(&act, write(s.delays))
		checkBatch(t, k, th.batches, s.batch)
		if got := th.List(); len(got) != 1 || got[v4].WriteDelay != s.delays[v4] {
			t.Errorf("tick %d: backend has %v, want the IPv4 consumer at %v", k, got, s.delays[v4])
		}
	}
	if l.ApplyErrors() != 3 {
		t.Errorf("%d apply errors counted, want 3 (one per refusing batch)", l.ApplyErrors())
	}
	if n := strings.Count(logged.String(), "cannot throttle this consumer"); n != 1 || !strings.Contains(logged.String(), "consumer=fd00::3") {
		t.Errorf("logged %d times, want once naming fd00::3:\n%s", n, logged.String())
	}
	th.batches = nil
	l.apply(&act, nil)
	checkBatch(t, 3, th.batches, map[netip.Addr]throttle.Setting{v4: {}})
	if len(act.refused) != 0 {
		t.Errorf("still remembered as refused: %v", act.refused)
	}
}

// Step sends no batch while no resource's wishes change (the backend
// holds them), and sends them again after a Release or a failed batch.
func TestStepSkipsUnchangedWishes(t *testing.T) {
	l, ss := scaleLoops(15, 10) // resources 11-14 over their threshold
	th := &batchThrottle{Memory: throttle.NewMemory()}
	l.t = th
	i := 0
	step := func(fail bool) {
		th.fail, th.batches = fail, nil
		ss.advance()
		if err := l.Step(time.Unix(0, int64(i)*1e8)); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range 200 {
		step(false)
	}
	want := th.List()
	if step(false); len(want) == 0 || len(th.batches) != 0 {
		t.Fatalf("steady: %d throttled, batches %v, want some and none", len(want), th.batches)
	}
	l.Release()
	step(true)
	if len(th.batches) != 1 || len(th.List()) != 0 {
		t.Fatalf("after release, a failing tick sent %d batches and left %v", len(th.batches), th.List())
	}
	if step(false); len(th.batches) != 1 || !maps.Equal(th.List(), want) {
		t.Errorf("the next tick sent %d batches and left %v, want %v", len(th.batches), th.List(), want)
	}
}
