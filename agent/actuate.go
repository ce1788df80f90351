package agent

import (
	"net/netip"

	"github.com/sanqos/sanqos/throttle"
)

// actuate merges every resource's wishes (a consumer on two saturated
// resources gets the larger delay) and applies only the differences, in
// one batch per change.
func (l *Loops) actuate(in <-chan desire) {
	a := newActuator()
	for d := range in {
		a.put(d)
		l.apply(a)
	}
	a.releaseAll()
	l.apply(a)
}

// actuator holds every resource's latest wishes and what was applied.
type actuator struct {
	per     map[string]desire
	applied map[netip.Addr]throttle.Setting
	// refused is why the backend last refused each consumer it cannot
	// throttle (a RefusedError): logged once per consumer and reason.
	refused map[netip.Addr]string
}

func newActuator() *actuator {
	return &actuator{per: map[string]desire{}, applied: map[netip.Addr]throttle.Setting{}, refused: map[netip.Addr]string{}}
}

// put records a resource's wishes; nil delays release the resource.
func (a *actuator) put(d desire) {
	if d.delays == nil {
		delete(a.per, d.resource)
	} else {
		a.per[d.resource] = d
	}
}

func (a *actuator) releaseAll() { clear(a.per) }

// diff merges the wishes (per consumer the largest delay of each kind
// wins, and the smallest non-zero rate cap) and returns the merged state
// and the batch that takes the applied state there.
func (a *actuator) diff() (merged map[netip.Addr]throttle.Setting, batch map[netip.Addr]throttle.Setting) {
	merged = make(map[netip.Addr]throttle.Setting, len(a.applied))
	for _, d := range a.per {
		for c, w := range d.delays {
			s := merged[c]
			s.WriteDelay = max(s.WriteDelay, w)
			merged[c] = s
		}
		for c, o := range d.other {
			s := merged[c]
			s.WriteDelay, s.ReadDelay = max(s.WriteDelay, o.WriteDelay), max(s.ReadDelay, o.ReadDelay)
			s.Rate, s.WriteRate = minCap(s.Rate, o.Rate), minCap(s.WriteRate, o.WriteRate)
			merged[c] = s
		}
	}
	batch = map[netip.Addr]throttle.Setting{}
	for c, s := range merged {
		if a.applied[c] != s {
			batch[c] = s
		}
	}
	for c := range a.applied {
		if _, ok := merged[c]; !ok {
			batch[c] = throttle.Setting{}
		}
	}
	return merged, batch
}

// apply sends the actuator's pending differences to the throttle. On error
// nothing is recorded as applied, so the next tick retries the whole diff.
// A RefusedError is not a refusal of the batch: the consumers it does not
// name were applied, and are recorded so; the named ones (an IPv6
// consumer on a backend that throttles IPv4 only) keep what they had, so
// the next tick retries them alone. Each such tick is counted, and each
// consumer logged once per reason.
func (l *Loops) apply(a *actuator) {
	merged, batch := a.diff()
	for c := range a.refused {
		if _, wanted := merged[c]; !wanted {
			delete(a.refused, c) // nobody asks to throttle it any more
		}
	}
	if len(batch) == 0 {
		return
	}
	err := l.t.Set(batch)
	refused, partial := throttle.Refused(err)
	if err != nil && !partial {
		l.applyErrs.Add(1)
		l.log.Error("applying throttles", "err", err, "consumers", len(batch))
		return
	}
	if partial {
		l.applyErrs.Add(1)
	}
	for c := range batch {
		why, no := refused[c.Unmap().WithZone("")]
		if !no {
			delete(a.refused, c)
			continue
		}
		if old, ok := a.applied[c]; ok {
			merged[c] = old
		} else {
			delete(merged, c)
		}
		if a.refused[c] != why.Error() {
			a.refused[c] = why.Error()
			l.log.Error("the throttle backend cannot throttle this consumer; the others are applied",
				"consumer", c, "setting", batch[c], "err", why)
		}
	}
	a.applied = merged
}

// minCap is the tighter of two rate caps, 0 meaning none.
func minCap(a, b uint64) uint64 {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
