package throttle

import (
	"errors"
	"fmt"
	"github.com/vishvananda/netlink"
	"maps"
	"net/netip"
)

func init() {
	Register(Entry{Name: "delayline+htb", Rank: 50, About: "the delay line, plus caps on the consumers' writes",
		Caps: Caps{Delay: true, WriteRate: true}, Parts: PartDevice | PartIptables | PartQueue | PartBPF,
		Needs: func(w WriteOn) [][]Feature {
			return append(append(delayLineNeeds(w),
				[]Feature{{"ifb", "ingress shaping device", "CONFIG_IFB", "ifb"}}, []Feature{kHTB},
				[]Feature{{"mirred", "redirect to ifb", "CONFIG_NET_ACT_MIRRED", "act_mirred"}}), needBPF...)
		},
		Objects:   []Objects{{"-dl", CleanupDelayLine}, {"-wc", CleanupWriteCap}},
		Probe:     delayLineWriteCapAvailable,
		Build:     newDelayLineWriteCap,
		Collector: delayLineCollector})
}

// newDelayLineWriteCap is the delay line for delays and write-rate caps on
// the target's ingress for the controller's second lever
// (rate_lever_steps).
func newDelayLineWriteCap(o Options, w WriteOn) (Throttle, error) {
	c, err := o.tc("-wc")
	if err != nil {
		return nil, err
	}
	dl, err := newDelayLineFrom(o, w)
	if err != nil {
		return nil, err
	}
	wc, err := NewWriteCap(WriteCapConfig{tcConfig: c})
	if err != nil {
		return nil, errors.Join(err, dl.Close())
	}
	return Layered(dl, wc), nil
}

// delayLineWriteCapAvailable is the delay line's probe and the write
// caps' together; the reason is the delay line's when it is missing. The
// write caps' builds their IFB, HTB tree and steering program on a
// scratch veth.
func delayLineWriteCapAvailable() (bool, string, error) {
	if ok, why := delayLineAvailable(); !ok {
		return false, "needs the delay line: " + why, nil
	}
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
	return true, "delay line plus write caps (ifb, htb and a tc BPF program work)", nil
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
