package throttle

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
)

// Layered runs two backends as one: delays (ReadDelay, WriteDelay) go to
// delay, rate caps (Rate, WriteRate) to rate. It is the agent's second
// lever: the delay line until its ceiling, then HTB write caps on the
// heaviest writers. Each Set stays all-or-nothing across both: if the
// rate backend refuses, the delay backend's consumers of that batch get
// their previous settings back.
//
// When delay is the delay line, the result also offers its Counters and
// Stats, so the agent's metrics and lateness watch keep working.
func Layered(delay, rate Throttle) Throttle {
	l := &layered{delay: delay, rate: rate}
	if dl, ok := delay.(*DelayLine); ok {
		return &layeredDelayLine{layered: l, dl: dl}
	}
	return l
}

type layered struct {
	delay, rate Throttle
	// mu makes Set/Clear one step each: a concurrent Set cannot slip
	// between the first backend's change and its rollback.
	mu sync.Mutex
}

type layeredDelayLine struct {
	*layered
	dl *DelayLine
}

func (l *layeredDelayLine) Counters() map[netip.Addr]DelayCounters { return l.dl.Counters() }
func (l *layeredDelayLine) Stats() DelayLineStats                  { return l.dl.Stats() }

func (l *layered) Name() string { return l.delay.Name() + "+" + l.rate.Name() }

func delayPart(s Setting) Setting { return Setting{ReadDelay: s.ReadDelay, WriteDelay: s.WriteDelay} }
func ratePart(s Setting) Setting  { return Setting{Rate: s.Rate, WriteRate: s.WriteRate} }

// split divides a batch between the backends. A consumer goes to a
// backend only if it gets something there now or had something before:
// then a delay-only consumer never reaches the rate backend, which may
// refuse what it cannot cap (HTB and IPv6), and the rate backend's
// consumers never cost the delay line a Set.
func split(settings, prevDelay, prevRate map[netip.Addr]Setting) (delay, rate map[netip.Addr]Setting) {
	delay, rate = map[netip.Addr]Setting{}, map[netip.Addr]Setting{}
	for a, s := range settings {
		if d := delayPart(s); !d.IsZero() || !prevDelay[a].IsZero() {
			delay[a] = d
		}
		if r := ratePart(s); !r.IsZero() || !prevRate[a].IsZero() {
			rate[a] = r
		}
	}
	return delay, rate
}

func (l *layered) Set(settings map[netip.Addr]Setting) error {
	if err := ValidateAll(settings); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set(settings)
}

func (l *layered) set(settings map[netip.Addr]Setting) error {
	prevDelay, prevRate := l.delay.List(), l.rate.List()
	delay, rate := split(settings, prevDelay, prevRate)
	if len(delay) > 0 {
		if err := l.delay.Set(delay); err != nil {
			return fmt.Errorf("%s: %w", l.delay.Name(), err)
		}
	}
	if len(rate) == 0 {
		return nil
	}
	err := l.rate.Set(rate)
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %w", l.rate.Name(), err)
	if len(delay) > 0 {
		undo := make(map[netip.Addr]Setting, len(delay))
		for a := range delay {
			undo[a] = delayPart(prevDelay[a])
		}
		if uerr := l.delay.Set(undo); uerr != nil {
			err = errors.Join(err, fmt.Errorf("rollback of %s: %w", l.delay.Name(), uerr))
		}
	}
	return err
}

// Clear is a Set of zero settings, so it is all-or-nothing too.
func (l *layered) Clear(consumers ...netip.Addr) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	zero := map[netip.Addr]Setting{}
	if len(consumers) == 0 {
		for a := range l.delay.List() {
			zero[a] = Setting{}
		}
		for a := range l.rate.List() {
			zero[a] = Setting{}
		}
	}
	for _, a := range consumers {
		zero[a] = Setting{}
	}
	return l.set(zero)
}

// List merges both backends' consumers, each contributing its own fields.
func (l *layered) List() map[netip.Addr]Setting {
	out := map[netip.Addr]Setting{}
	for a, s := range maps.All(l.delay.List()) {
		out[a] = delayPart(s)
	}
	for a, s := range maps.All(l.rate.List()) {
		m := out[a]
		m.Rate, m.WriteRate = s.Rate, s.WriteRate
		out[a] = m
	}
	for a, s := range out {
		if s.IsZero() {
			delete(out, a)
		}
	}
	return out
}

// Close closes both backends, the second even when the first fails, and
// joins their errors. They own disjoint kernel objects, so the order
// does not matter.
func (l *layered) Close() error {
	return errors.Join(l.rate.Close(), l.delay.Close())
}
