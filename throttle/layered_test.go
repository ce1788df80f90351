package throttle

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// refusing is a Memory whose Set fails on demand.
type refusing struct {
	*Memory
	fail bool
}

func (r *refusing) Set(s map[netip.Addr]Setting) error {
	if r.fail {
		return errors.New("refused")
	}
	return r.Memory.Set(s)
}

func TestLayered(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	delay, rate := NewMemory(), &refusing{Memory: NewMemory()}
	l := Layered(delay, rate)
	if err := l.Set(map[netip.Addr]Setting{a: {WriteDelay: 20 * time.Millisecond, WriteRate: 1 << 20}, b: {ReadDelay: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if got := delay.List()[a]; got != (Setting{WriteDelay: 20 * time.Millisecond}) {
		t.Errorf("delay backend got %+v", got)
	}
	if got := rate.List(); got[a] != (Setting{WriteRate: 1 << 20}) || len(got) != 1 {
		t.Errorf("rate backend got %+v", got)
	}
	if got := l.List()[a]; got != (Setting{WriteDelay: 20 * time.Millisecond, WriteRate: 1 << 20}) {
		t.Errorf("List merges to %+v", got)
	}
	// A refused cap leaves both backends as they were.
	rate.fail = true
	if err := l.Set(map[netip.Addr]Setting{a: {WriteDelay: 30 * time.Millisecond, WriteRate: 2 << 20}, b: {}}); err == nil {
		t.Fatal("the second backend's refusal was swallowed")
	}
	if got := delay.List(); got[a].WriteDelay != 20*time.Millisecond || got[b].ReadDelay != time.Millisecond {
		t.Errorf("the delays were not restored: %+v", got)
	}
	if err := l.Set(map[netip.Addr]Setting{a: {WriteDelay: time.Second}}); err == nil || delay.List()[a].WriteDelay != 20*time.Millisecond {
		t.Errorf("an invalid batch must be refused before either backend sees it: %v", err)
	}
	rate.fail = false
	if err := l.Close(); err != nil || len(delay.List())+len(rate.List()) != 0 {
		t.Errorf("Close: %v, left %v %v", err, delay.List(), rate.List())
	}
	if l.Name() != "dry-run+dry-run" {
		t.Errorf("name %q", l.Name())
	}
}

// reinstaller is a Memory whose guard reinstalled n times.
type reinstaller struct {
	*Memory
	n uint64
}

func (r reinstaller) Reinstalls() uint64 { return r.n }

// A layered pair's reinstalls are both halves' (a half without a guard
// counts none).
func TestLayeredReinstalls(t *testing.T) {
	if got := Layered(reinstaller{NewMemory(), 2}, reinstaller{NewMemory(), 3}).(Reinstaller).Reinstalls(); got != 5 {
		t.Errorf("reinstalls %d, want 5", got)
	}
	if got := Layered(NewMemory(), reinstaller{NewMemory(), 3}).(Reinstaller).Reinstalls(); got != 3 {
		t.Errorf("reinstalls %d, want 3", got)
	}
}

// counting is a Memory that counts as the delay line does.
type counting struct{ *Memory }

func (counting) Counters() map[netip.Addr]DelayCounters { return nil }
func (counting) Stats() DelayLineStats                  { return DelayLineStats{Held: 7} }

// The agent's API and lateness watch find the delay line's counts also
// under write caps (delayline+htb), and nothing in a backend that holds
// no packets.
func TestCountingOf(t *testing.T) {
	for _, tc := range []struct {
		th   Throttle
		held int
		ok   bool
	}{
		{counting{NewMemory()}, 7, true},
		{Layered(counting{NewMemory()}, NewMemory()), 7, true},
		{NewMemory(), 0, false},
		{Layered(NewMemory(), counting{NewMemory()}), 0, false},
	} {
		c := CountingOf(tc.th)
		if (c != nil) != tc.ok || c != nil && c.Stats().Held != tc.held {
			t.Errorf("CountingOf(%s) = %v", tc.th.Name(), c)
		}
	}
}
