package throttle

import (
	"errors"
	"maps"
	"net/netip"
	"testing"
	"time"
)

// fakeThrottle records settings like Memory, accepts only the fields it
// is told to, and fails its next Set when fail is set.
type fakeThrottle struct {
	*Memory
	name   string
	accept func(Setting) bool
	fail   error
	sets   int
	closed bool
}

func newFake(name string, accept func(Setting) bool) *fakeThrottle {
	return &fakeThrottle{Memory: NewMemory(), name: name, accept: accept}
}

func (f *fakeThrottle) Name() string { return f.name }

func (f *fakeThrottle) Set(s map[netip.Addr]Setting) error {
	f.sets++
	if f.fail != nil {
		return f.fail
	}
	for a, x := range s {
		if !f.accept(x) {
			return errors.Join(ErrUnsupported, errors.New(a.String()))
		}
	}
	return f.Memory.Set(s)
}

func (f *fakeThrottle) Close() error { f.closed = true; return f.fail }

func delaysOnly(s Setting) bool { return s.Rate == 0 && s.WriteRate == 0 }
func ratesOnly(s Setting) bool  { return s.ReadDelay == 0 && s.WriteDelay == 0 }

func TestLayeredSplitsAndMerges(t *testing.T) {
	d, r := newFake("delayline", delaysOnly), newFake("htb", ratesOnly)
	l := Layered(d, r)
	if l.Name() != "delayline+htb" {
		t.Errorf("name %q", l.Name())
	}
	a, b, v6 := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("fd00::1")
	both := Setting{WriteDelay: 5 * time.Millisecond, WriteRate: 1 << 20}
	if err := l.Set(map[netip.Addr]Setting{a: both, v6: {ReadDelay: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if got := d.List(); len(got) != 2 || got[a] != (Setting{WriteDelay: 5 * time.Millisecond}) {
		t.Errorf("delay backend got %v", got)
	}
	// A delay-only consumer never reaches the rate backend.
	if got := r.List(); len(got) != 1 || got[a] != (Setting{WriteRate: 1 << 20}) {
		t.Errorf("rate backend got %v", got)
	}
	want := map[netip.Addr]Setting{a: both, v6: {ReadDelay: time.Millisecond}}
	if got := l.List(); !maps.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	// Dropping the rate while keeping the delay reaches the rate backend
	// (it had the consumer) with a zero setting.
	if err := l.Set(map[netip.Addr]Setting{a: {WriteDelay: 5 * time.Millisecond}, b: {Rate: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	if got := r.List(); len(got) != 1 || got[b] != (Setting{Rate: 1 << 20}) {
		t.Errorf("rate backend after drop: %v", got)
	}
	if err := l.Clear(); err != nil {
		t.Fatal(err)
	}
	if len(l.List()) != 0 || len(d.List()) != 0 || len(r.List()) != 0 {
		t.Errorf("Clear left %v", l.List())
	}
	if err := l.Set(map[netip.Addr]Setting{a: {WriteDelay: time.Second}}); err == nil {
		t.Error("invalid delay accepted")
	}
	if d.sets != 3 {
		t.Errorf("an invalid batch reached a backend (%d sets)", d.sets)
	}
	r.fail = errors.New("boom")
	if err := l.Close(); err == nil || !d.closed || !r.closed {
		t.Errorf("Close: %v, closed %v %v", err, d.closed, r.closed)
	}
}

// A failing rate backend leaves the delay backend as it was.
func TestLayeredAllOrNothing(t *testing.T) {
	d, r := newFake("delayline", delaysOnly), newFake("htb", ratesOnly)
	l := Layered(d, r)
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	before := map[netip.Addr]Setting{a: {WriteDelay: 2 * time.Millisecond}}
	if err := l.Set(before); err != nil {
		t.Fatal(err)
	}
	r.fail = errors.New("no ifb")
	err := l.Set(map[netip.Addr]Setting{
		a: {WriteDelay: 9 * time.Millisecond, WriteRate: 1 << 20},
		b: {ReadDelay: time.Millisecond, Rate: 1 << 20},
	})
	if !errors.Is(err, r.fail) {
		t.Fatalf("err = %v", err)
	}
	if got := d.List(); !maps.Equal(got, before) {
		t.Errorf("delay backend changed by a failed batch: %v", got)
	}
	if got := l.List(); !maps.Equal(got, before) {
		t.Errorf("List = %v", got)
	}
	r.fail = nil
	if err := l.Set(map[netip.Addr]Setting{a: {WriteDelay: 9 * time.Millisecond, ReadDelay: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
}

func TestLayeredForwardsDelayLineStats(t *testing.T) {
	if _, ok := Layered(&DelayLine{}, NewMemory()).(interface{ Stats() DelayLineStats }); !ok {
		t.Error("delay line stats hidden")
	}
	if _, ok := Layered(NewMemory(), NewMemory()).(interface{ Stats() DelayLineStats }); ok {
		t.Error("stats offered without a delay line")
	}
}
