package throttle

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// RefusedError is what Set returns when a backend applied a batch except
// for some consumers it cannot throttle as asked (an address family or a
// kind of setting it lacks, such as IPv6 on a backend whose kernel side
// reads IPv4 only). Those consumers were left as they were; every other
// consumer of the batch was applied. A backend returns it rather than
// refusing the whole batch, so one consumer it cannot serve never holds
// back the throttles of the others (issue 52: one IPv6 initiator stopped
// every delay on EDT, since the agent resends the whole batch each tick).
type RefusedError struct {
	Backend   string
	Consumers map[netip.Addr]error // why each was not applied
}

func (e *RefusedError) Error() string {
	addrs := slices.SortedFunc(maps.Keys(e.Consumers), netip.Addr.Compare)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d consumer(s) not throttled (the others were applied):", e.Backend, len(addrs))
	for i, a := range addrs {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " %v: %v", a, e.Consumers[a])
	}
	return b.String()
}

// Unwrap lets errors.Is find the reasons (ErrUnsupported).
func (e *RefusedError) Unwrap() []error { return slices.Collect(maps.Values(e.Consumers)) }

// Refused returns the consumers err says were not applied (nil when err
// is nil or refused the whole batch), and whether err is a RefusedError.
func Refused(err error) (map[netip.Addr]error, bool) {
	var r *RefusedError
	if !errors.As(err, &r) {
		return nil, false
	}
	return r.Consumers, true
}

// refusals collects the consumers a backend leaves out of a batch.
type refusals struct {
	backend string
	m       map[netip.Addr]error
}

// add records that a was not applied, and why.
func (r *refusals) add(a netip.Addr, why error) {
	if r.m == nil {
		r.m = map[netip.Addr]error{}
	}
	r.m[a] = why
}

// err is the RefusedError of what was left out, nil if nothing was.
func (r *refusals) err() error {
	if len(r.m) == 0 {
		return nil
	}
	return &RefusedError{Backend: r.backend, Consumers: r.m}
}

// errIPv6 is the reason a backend that reads IPv4 headers only gives an
// IPv6 consumer it cannot throttle.
var errIPv6 = fmt.Errorf("IPv6: %w", ErrUnsupported)

// only4 is the common split of a batch for backends that throttle IPv4
// consumers only: an IPv6 consumer with a setting throttles says they
// would apply is refused (for why), and one being cleared passes, since
// there is nothing of it to remove. Addresses come back unmapped,
// without zone.
func only4(backend string, settings map[netip.Addr]Setting, throttles func(Setting) bool, why error) (map[netip.Addr]Setting, *refusals) {
	out := make(map[netip.Addr]Setting, len(settings))
	r := &refusals{backend: backend}
	for a, s := range settings {
		a = plainAddr(a)
		if !a.Is4() && throttles(s) {
			r.add(a, why)
			continue
		}
		out[a] = s
	}
	return out, r
}

// plainAddr is a consumer's address as the kernel sees it in a packet:
// an IPv4-mapped IPv6 address as IPv4, no zone.
func plainAddr(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }
