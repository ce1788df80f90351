package agent

import (
	"net/netip"

	"github.com/sanqos/sanqos/throttle"
)

// actuator is what the backend was last given, and whom it refused.
type actuator struct {
	applied map[netip.Addr]throttle.Setting
	// refused is why the backend last refused each consumer it cannot
	// throttle (a RefusedError): logged once per consumer and reason.
	refused map[netip.Addr]string
	// spare is the map applied was before the last batch: the next
	// tick's merge reuses it.
	spare map[netip.Addr]throttle.Setting
	// clean: the backend holds the last merged wishes (no error, nobody
	// refused), so wishes that did not change need no batch.
	clean bool
}

func newActuator() actuator {
	return actuator{applied: map[netip.Addr]throttle.Setting{}, refused: map[netip.Addr]string{}}
}

// merge is every resource's wishes in one: a consumer on two saturated
// resources gets the larger delay of each kind and the tighter non-zero
// rate cap. It merges into dst, cleared (nil: a new map).
func merge(dst map[netip.Addr]throttle.Setting, wishes []map[netip.Addr]throttle.Setting) map[netip.Addr]throttle.Setting {
	merged := dst
	if merged == nil {
		merged = map[netip.Addr]throttle.Setting{}
	}
	clear(merged)
	for _, w := range wishes {
		if len(w) == 0 {
			continue // most resources ask nobody: no iterator to start
		}
		for c, o := range w {
			s := merged[c]
			s.WriteDelay, s.ReadDelay = max(s.WriteDelay, o.WriteDelay), max(s.ReadDelay, o.ReadDelay)
			s.Rate, s.WriteRate = minCap(s.Rate, o.Rate), minCap(s.WriteRate, o.WriteRate)
			merged[c] = s
		}
	}
	return merged
}

// apply sends the backend, in one batch, what takes the applied state to
// merged (the tick's merged wishes; nil releases everything). On error
// nothing is recorded as applied, so the next tick retries the whole diff.
// A RefusedError is not a refusal of the batch: the consumers it does not
// name were applied, and are recorded so; the named ones (an IPv6
// consumer on a backend that throttles IPv4 only) keep what they had, so
// the next tick retries them alone. Each such tick is counted, and each
// consumer logged once per reason.
func (l *Loops) apply(a *actuator, merged map[netip.Addr]throttle.Setting) {
	if merged == nil {
		merged = map[netip.Addr]throttle.Setting{}
	}
	batch := map[netip.Addr]throttle.Setting{}
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
	for c := range a.refused {
		if _, wanted := merged[c]; !wanted {
			delete(a.refused, c) // nobody asks to throttle it any more
		}
	}
	a.clean = len(batch) == 0
	if a.clean {
		return
	}
	err := l.t.Set(batch)
	refused, partial := throttle.Refused(err)
	a.clean = err == nil
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
	a.spare, a.applied = a.applied, merged
}

// minCap is the tighter of two rate caps, 0 meaning none.
func minCap(a, b uint64) uint64 {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
