package throttle

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"

	"github.com/vishvananda/netlink"
)

func init() {
	Register(Entry{Name: "delayline+htb", Rank: 50, About: "the delay line, plus caps on the consumers' writes",
		Caps: Caps{Delay: true, WriteRate: true}, Parts: PartDevice | PartIptables | PartQueue | PartBPF,
		Needs: func(w WriteOn) [][]Feature {
			return append(append(delayLineNeeds(w), needWriteCaps...), needBPF...)
		},
		Objects: []Objects{{"-dl", CleanupDelayLine}, {"-wc", CleanupWriteCap}},
		Probe: func() (bool, string, error) {
			if ok, why := delayLineAvailable(); !ok {
				return false, "needs the delay line: " + why, nil
			}
			return writeCapAvailable("delay line")
		},
		Build:     withWriteCaps(newDelayLineFrom),
		Collector: delayLineCollector})
	// edt+htb is edt with the same write caps: the controller's second
	// lever (rate_lever_steps) on the kernel's delay backend. A delay
	// slows a writer by the commands it has in flight over the delay, so
	// past max_delay a writer whose commands each hold the resource long
	// (large writes on a slow group) or that has many in flight keeps
	// the resource saturated; only a cap on its rate reaches it.
	Register(Entry{Name: "edt+htb", Rank: 55, About: "edt, plus caps on the consumers' writes",
		Caps: Caps{Delay: true, WriteRate: true}, Parts: PartDevice | PartBPF,
		Needs:   func(WriteOn) [][]Feature { return append(append(edtNeeds[:1:1], needWriteCaps...), needBPF...) },
		Objects: []Objects{{"-edt", CleanupEDT}, {"-wc", CleanupWriteCap}},
		Probe: func() (bool, string, error) {
			if ok, why := EDTAvailable(); !ok {
				return false, "needs edt: " + why, nil
			}
			return writeCapAvailable("edt")
		},
		Build: withWriteCaps(newEDTFrom)})
}

// needWriteCaps are the kernel features of the write caps beside their
// tc BPF program.
var needWriteCaps = [][]Feature{{{"ifb", "ingress shaping device", "CONFIG_IFB", "ifb"}}, {kHTB},
	{{"mirred", "redirect to ifb", "CONFIG_NET_ACT_MIRRED", "act_mirred"}}}

// withWriteCaps builds a delay backend with write-rate caps on the
// target's ingress beside it, for the controller's second lever
// (rate_lever_steps).
func withWriteCaps(delay func(Options, WriteOn) (Throttle, error)) func(Options, WriteOn) (Throttle, error) {
	return func(o Options, w WriteOn) (Throttle, error) {
		c, err := o.tc("-wc")
		if err != nil {
			return nil, err
		}
		d, err := delay(o, w)
		if err != nil {
			return nil, err
		}
		wc, err := NewWriteCap(WriteCapConfig{tcConfig: c})
		if err != nil {
			return nil, errors.Join(err, d.Close())
		}
		return Layered(d, wc), nil
	}
}

// writeCapAvailable builds the write caps' IFB, HTB tree and steering
// program on a scratch veth; delay names the backend they join.
func writeCapAvailable(delay string) (bool, string, error) {
	err := inScratchNS(func(dev netlink.Link) error {
		w, err := NewWriteCap(WriteCapConfig{tcConfig: probeConfig(dev)})
		if err != nil {
			return err
		}
		return w.Close()
	})
	if err != nil {
		return false, "write caps: " + err.Error(), nil
	}
	return true, delay + " plus write caps (ifb, htb and a tc BPF program work)", nil
}

// Layered drives two backends as one: delays (read and write) go to the
// first, rate caps (read and write) to the second, so the agent's second
// lever — write-rate caps past the delay's ceiling — runs beside any delay
// backend. Each Set is all-or-nothing across both: if the second refuses,
// the first gets back the settings it had for those consumers. A
// RefusedError of either is not a refusal of the batch: the consumers
// either named are named in one RefusedError, the rest stand.
func Layered(delay, rate Throttle) Throttle { return &layered{delay: delay, rate: rate} }

type layered struct{ delay, rate Throttle }

func (l *layered) Name() string { return l.delay.Name() + "+" + l.rate.Name() }

func split(s Setting) (delay, rate Setting) {
	return Setting{ReadDelay: s.ReadDelay, WriteDelay: s.WriteDelay}, Setting{Rate: s.Rate, WriteRate: s.WriteRate}
}

func (l *layered) Set(settings map[netip.Addr]Setting) error {
	if err := ValidateAll(settings); err != nil {
		return err
	}
	d, r := map[netip.Addr]Setting{}, map[netip.Addr]Setting{}
	for a, s := range settings {
		d[a], r[a] = split(s)
	}
	before := l.delay.List()
	err := l.delay.Set(d)
	dref, partial := Refused(err)
	if err != nil && !partial {
		return err
	}
	err = l.rate.Set(r)
	rref, partial := Refused(err)
	if err != nil && !partial {
		undo := map[netip.Addr]Setting{}
		for a := range d {
			if _, refused := dref[a]; !refused {
				undo[a] = before[a] // zero where it had none
			}
		}
		if uerr := l.delay.Set(undo); uerr != nil {
			return errors.Join(err, fmt.Errorf("restoring the delays after the failed caps: %w", uerr))
		}
		return err
	}
	// A consumer one of them could not serve is named, whatever the
	// other applied for it; the rest of the batch stands.
	refused := &refusals{backend: l.Name()}
	for _, m := range []map[netip.Addr]error{dref, rref} {
		for a, why := range m {
			refused.add(a, why)
		}
	}
	return refused.err()
}

func (l *layered) List() map[netip.Addr]Setting {
	out := maps.Clone(l.delay.List())
	if out == nil {
		out = map[netip.Addr]Setting{}
	}
	for a, s := range l.rate.List() {
		m := out[a]
		m.Rate, m.WriteRate = s.Rate, s.WriteRate
		out[a] = m
	}
	return out
}

// Reinstalls implements Reinstaller: both backends' reinstalls.
func (l *layered) Reinstalls() uint64 {
	var n uint64
	for _, t := range []Throttle{l.delay, l.rate} {
		if r, ok := t.(Reinstaller); ok {
			n += r.Reinstalls()
		}
	}
	return n
}

// Close closes the caps first: a writer must never be left capped by a
// half-closed pair.
func (l *layered) Close() error { return errors.Join(l.rate.Close(), l.delay.Close()) }
