package throttle

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"
)

// The one list of throttle backends. Config validation, the agent's
// --backend, auto, the lab's --backends and `sanqos throttle backends`
// all read it, so a backend added or renamed here is added or renamed
// everywhere (issue 31: the names were spelled out in five places, and
// drifted). One table rather than each backend registering itself in
// init(): the order is meaningful (auto's preference, the listing) and
// init order is the order of the file names.

// Options configure whichever backend New builds: the agent's flags,
// overridden by its config (cmd/sanqos resolves them). Each constructor
// takes what it needs.
type Options struct {
	// Port is the target's TCP port whose traffic is throttled.
	Port int
	// Chain is the netfilter chain of the agent's mode: OUTPUT (target
	// mode) or FORWARD (bridge mode).
	Chain string
	// Label prefixes the kernel objects; each backend adds its own suffix
	// so that two backends of one agent never share an object.
	Label string
	// Device is the interface towards the consumers (edt, netem, htb,
	// write caps); empty: the only non-loopback one (ConsumerInterface).
	Device string
	// QueueLimit bounds the packets the delay line holds (0: its default).
	QueueLimit int
	// Ramp is the delay line's growth limit (config delay_ramp).
	Ramp float64
	// Follow caps delays by the sender's modelled srtt (config delay_follow).
	Follow bool
	// WriteOn is replies or acks (config write_delay_on; "" is replies).
	WriteOn string
	// MaxDelay and Step size the netem tree, one leaf per step up to the
	// controller's max_delay (config; 0: the backend's 20 ms in 0.5 ms).
	MaxDelay, Step time.Duration
	// Log is the agent's logger (default slog.Default()).
	Log *slog.Logger
	// Check is how often a backend checks that its kernel objects are
	// still there, and reinstalls them if not (guard.go); 0: DefaultCheck.
	// The agent passes its control interval.
	Check time.Duration
}

func (o Options) logger() *slog.Logger {
	if o.Log == nil {
		return slog.Default()
	}
	return o.Log
}

// ConsumerDevice is the interface towards the consumers: Device, else
// the only non-loopback one (ConsumerInterface).
func (o Options) ConsumerDevice() (string, error) {
	if o.Device != "" {
		return o.Device, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	return ConsumerInterface(ifs)
}

// tcChain maps the agent's chain to the mangle chain the tc backends
// hook: they mark in POSTROUTING by default, which sees both modes.
func (o Options) tcChain() string {
	if o.Chain == "OUTPUT" {
		return ""
	}
	return o.Chain
}

// registered is one backend of the table.
type registered struct {
	name string
	// about is what it does, in the few words `sanqos throttle backends`
	// prints beside its availability.
	about string
	// delays: the backend delays packets, so auto may choose it (in the
	// table's order) and the lab may compare it (lab run --backends).
	delays bool
	// probe says whether this kernel runs the backend and why (or why
	// not); err is a probe that could not tell. Probes use scratch
	// network namespaces only.
	probe func() (ok bool, why string, err error)
	build func(o Options, w WriteOn) (Throttle, error)
	// auto is how Auto speaks of a delay backend (see autoText).
	auto autoText
}

// autoName is the name that picks the best delay backend this kernel runs
// (Auto).
const autoName = "auto"

var registry = []registered{
	{name: "edt", delays: true,
		about: "kernel delay: tc BPF departure times, fq holds each packet",
		probe: func() (bool, string, error) { ok, why := EDTAvailable(); return ok, why, nil },
		build: func(o Options, w WriteOn) (Throttle, error) {
			dev, err := o.ConsumerDevice()
			if err != nil {
				return nil, err
			}
			return NewEDT(EDTConfig{Device: dev, Label: o.Label + "-edt", Port: uint16(o.Port), WriteOn: w, Check: o.Check, Log: o.Log})
		},
		auto: autoText{has: "fq and tc BPF", logMiss: true}},
	{name: "netem", delays: true,
		about: "kernel delay: the thesis' tree, one netem leaf per step",
		probe: func() (bool, string, error) {
			ok, err := NetemAvailable()
			return ok, cond(ok, "kernel has netem", ErrNoNetem.Error()), err
		},
		build: newNetemFrom,
		auto:  autoText{has: "netem"}},
	{name: "delayline", delays: true,
		about: "userspace delay: NFQUEUE, the agent releases each packet",
		probe: func() (bool, string, error) { ok, why := delayLineAvailable(); return ok, why, nil },
		build: newDelayLineFrom,
		auto: autoText{lacks: "no fq and no netem in this kernel",
			why: "kernel has neither fq (for edt) nor netem (CONFIG_NET_SCH_FQ, CONFIG_NET_SCH_NETEM)"}},
	{name: "htb",
		about: "rate caps towards the consumers, no delay",
		probe: func() (bool, string, error) {
			ok, err := htbAvailable()
			return ok, cond(ok, "kernel has htb", "kernel has no htb qdisc (CONFIG_NET_SCH_HTB)"), err
		},
		build: func(o Options, _ WriteOn) (Throttle, error) {
			dev, err := o.ConsumerDevice()
			if err != nil {
				return nil, err
			}
			return NewHTB(HTBConfig{Device: dev, Label: o.Label + "-htb", Port: uint16(o.Port), Chain: o.tcChain(), Check: o.Check, Log: o.Log})
		},
	},
	{name: "delayline+htb",
		about: "the delay line, plus caps on the consumers' writes",
		probe: delayLineWriteCapAvailable,
		build: newDelayLineWriteCap,
	},
	{name: "dry-run",
		about: "records settings, touches nothing (tests, shadow agents)",
		probe: func() (bool, string, error) { return true, "needs nothing of the kernel", nil },
		build: func(Options, WriteOn) (Throttle, error) { return NewMemory(), nil },
	},
}

func cond(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// Names lists what a config's backend or --backend may name: auto, then
// every backend in the table's order.
func Names() []string {
	out := []string{autoName}
	for _, r := range registry {
		out = append(out, r.name)
	}
	return out
}

// DelayNames lists the backends that delay packets, in auto's order of
// preference (htb caps rates, dry-run does nothing).
func DelayNames() []string {
	var out []string
	for _, r := range delayBackends() {
		out = append(out, r.name)
	}
	return out
}

func delayBackends() []registered {
	var out []registered
	for _, r := range registry {
		if r.delays {
			out = append(out, r)
		}
	}
	return out
}

// New builds the backend name (one of Names) from o. An unknown name and
// a bad write_delay_on are refused before anything touches the kernel.
func New(name string, o Options) (Throttle, error) {
	i := slices.IndexFunc(registry, func(r registered) bool { return r.name == name })
	if i < 0 && name != autoName {
		return nil, fmt.Errorf("unknown backend %q (%s)", name, strings.Join(Names(), "|"))
	}
	w, err := ParseWriteOn(o.WriteOn)
	if err != nil {
		return nil, err
	}
	if name == autoName {
		return auto(delayBackends(), o, w)
	}
	return registry[i].build(o, w)
}

// Backend is one backend as `sanqos throttle backends` lists it.
type Backend struct {
	Name      string `json:"name"`
	About     string `json:"about"`
	Available bool   `json:"available"`
	Why       string `json:"why"`
	// Auto: the backend auto would choose on this kernel.
	Auto bool `json:"auto,omitempty"`
}

// Backends probes what this kernel runs of every backend, in the table's
// order (auto's preference first), and marks the one auto would take.
func Backends() []Backend {
	out := make([]Backend, 0, len(registry))
	auto := false
	for _, r := range registry {
		ok, why, err := r.probe()
		if err != nil {
			why = err.Error()
		}
		b := Backend{Name: r.name, About: r.about, Available: ok, Why: why}
		if ok && r.delays && !auto {
			b.Auto, auto = true, true
		}
		out = append(out, b)
	}
	return out
}

// newNetemFrom builds the netem tree. It reaches the controller's
// max_delay: with netem's own 20 ms under a 40 ms max_delay every larger
// wish failed to apply (seen in the stock-kernel guest's autonomic).
func newNetemFrom(o Options, w WriteOn) (Throttle, error) {
	dev, err := o.ConsumerDevice()
	if err != nil {
		return nil, err
	}
	return NewNetem(NetemConfig{Device: dev, Label: o.Label + "-ne", Port: uint16(o.Port), Chain: o.tcChain(), WriteOn: w, Log: o.Log,
		MaxDelay: o.MaxDelay, Step: o.Step, Check: o.Check})
}

func newDelayLineFrom(o Options, w WriteOn) (Throttle, error) {
	return NewDelayLine(DelayLineConfig{Port: uint16(o.Port), Chain: o.Chain, Label: o.Label + "-dl", QueueLimit: o.QueueLimit,
		Ramp: o.Ramp, Follow: o.Follow, WriteOn: w, Check: o.Check, Log: o.Log})
}

// newDelayLineWriteCap is the delay line for delays and write-rate caps on
// the target's ingress for the controller's second lever
// (rate_lever_steps).
func newDelayLineWriteCap(o Options, w WriteOn) (Throttle, error) {
	dev, err := o.ConsumerDevice()
	if err != nil {
		return nil, err
	}
	dl, err := newDelayLineFrom(o, w)
	if err != nil {
		return nil, err
	}
	wc, err := NewWriteCap(WriteCapConfig{Device: dev, Label: o.Label + "-wc", Port: uint16(o.Port), Check: o.Check, Log: o.Log})
	if err != nil {
		return nil, errors.Join(err, dl.Close())
	}
	return Layered(dl, wc), nil
}
