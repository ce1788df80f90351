package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The one list of throttle backends. Each backend's file registers its
// Entry from init (as node_exporter's collectors do), and everything the
// rest of the program asks of a backend is in that entry: config
// validation, the agent's --backend, auto's choice, the lab's --backends,
// `sanqos throttle backends`, `sanqos cleanup`, doctor and the agent's
// metrics read it and nothing else. Adding a backend is one file and one
// Register (TestRegisteredBackendIsSeenEverywhere, doctor). The order
// (auto's preference, the listings) is each entry's Rank, not the order
// in which the files' init functions run.

// Options configure whichever backend New builds: the agent's flags,
// overridden by its config (cmd/sanqos resolves them). Each constructor
// takes what it needs.
type Options struct {
	// Ports are the target's TCP ports whose traffic is throttled
	// (config ports): each backend matches any of them (empty: the delay
	// line takes 3260, the tc backends every TCP port).
	Ports []uint16
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

// Entry is one backend: what it is, what it can do, what it needs of
// the kernel, what it leaves there, and how it is built.
type Entry struct {
	Name string
	// About is what it does, in the few words `sanqos throttle backends`
	// prints beside its availability.
	About string
	// Rank orders the table: auto tries its candidates by rank, and every
	// listing follows it.
	Rank int
	// Auto: a kernel delay backend, which auto may choose (in rank order;
	// the last is auto's fallback, built without a probe) and the lab
	// compares (lab run --backends).
	Auto bool
	// AutoHas is what the kernel has when the probe passes, as auto's
	// error says it when the backend then fails; for the fallback, why
	// it runs anywhere.
	AutoHas string
	// Caps are the settings it applies.
	Caps Caps
	// Parts are the kinds of kernel objects it builds (doctor checks
	// what each needs: an interface, iptables, a free queue, BPF).
	Parts Part
	// Needs lists the kernel features it needs, each a set of
	// alternatives (iptables-legacy's: doctor maps them for
	// iptables-nft), for the write_delay_on in effect; doctor's kernel
	// check lists every feature an entry names.
	Needs func(w WriteOn) [][]Feature
	// Probes are the features its Probe tests, so doctor can predict
	// auto's choice from the kernel config (nil: the fallback).
	Probes [][]Feature
	// Objects are the kernel objects it creates, by label suffix: the
	// agent's label plus the suffix names them, and each Cleanup removes
	// a crashed instance's (Cleanup). nil: it creates none.
	Objects []Objects
	// Probe says whether this kernel runs the backend and why (or why
	// not); err is a probe that could not tell. Probes use scratch
	// network namespaces only.
	Probe func() (ok bool, why string, err error)
	// Build makes it; the backend checks its kernel objects and repairs
	// them itself (its guard: check and repair in its own file).
	Build func(o Options, w WriteOn) (Throttle, error)
	// Collector, if set, exports the backend's own metrics (the delay
	// line's counters) beside the agent's; of a nil Throttle, a
	// collector that only describes them (the dashboard's test).
	Collector func(Throttle) prometheus.Collector
}

// Caps are the settings a backend applies; the rest it refuses
// (ErrUnsupported).
type Caps struct {
	Delay     bool // read and write delays
	Rate      bool // rate caps towards the consumers (their reads)
	WriteRate bool // caps on the consumers' writes (rate_lever_steps)
	IPv6      bool // IPv6 consumers too (the delay line: with ip6tables)
}

// Part is a kind of kernel object a backend builds.
type Part uint8

const (
	PartDevice   Part = 1 << iota // qdiscs on the interface towards the consumers
	PartIptables                  // rules and ipsets
	PartQueue                     // an NFQUEUE binding
	PartBPF                       // a tc BPF program
)

// Feature is a kernel feature a backend needs, as doctor checks it in
// the kernel config.
type Feature struct {
	Key    string // doctor's name for it
	What   string // what it is, for the kernel check's listing
	Symbol string // its Kconfig symbol
	Module string // its module when built as one; "" if it cannot be
}

// The kernel features several backends need; one backend's own are in
// its file.
var (
	kHTB    = Feature{"htb", "htb qdisc", "CONFIG_NET_SCH_HTB", "sch_htb"}
	kClsact = Feature{"clsact", "clsact hook for tc BPF", "CONFIG_NET_SCH_INGRESS", "sch_ingress"}
	kClsBPF = Feature{"cls_bpf", "tc BPF classifier", "CONFIG_NET_CLS_BPF", "cls_bpf"}
	kBPF    = Feature{"bpf", "bpf(2)", "CONFIG_BPF_SYSCALL", ""}
	kClsFw  = Feature{"cls_fw", "mark → class filter (else u32)", "CONFIG_NET_CLS_FW", "cls_fw"}
	kClsU32 = Feature{"cls_u32", "mark → class filter fallback", "CONFIG_NET_CLS_U32", "cls_u32"}
	kXtU32  = Feature{"xt_u32", "iptables -m u32 (pure-ACK tests)", "CONFIG_NETFILTER_XT_MATCH_U32", "xt_u32"}
	kMangle = Feature{"iptable_mangle", "mangle table (marks)", "CONFIG_IP_NF_MANGLE", "iptable_mangle"}

	needSets = [][]Feature{
		{{"ipset", "consumer sets", "CONFIG_IP_SET", "ip_set"}},
		{{"ipset_hash_ip", "consumer sets of type hash:ip", "CONFIG_IP_SET_HASH_IP", "ip_set_hash_ip"}},
		{{"xt_set", "iptables -m set / -j SET", "CONFIG_NETFILTER_XT_SET", "xt_set"}},
		{{"xt_comment", "iptables -m comment (rule labels)", "CONFIG_NETFILTER_XT_MATCH_COMMENT", "xt_comment"}},
		// ports lists two by default (3260 and 4420): one rule matches them all.
		{{"xt_multiport", "iptables -m multiport (several ports)", "CONFIG_NETFILTER_XT_MATCH_MULTIPORT", "xt_multiport"}},
	}
	needMark = append([][]Feature{{kHTB}, {kClsFw, kClsU32}, {kMangle}}, needSets...)
	needBPF  = [][]Feature{{kClsact}, {kClsBPF}, {kBPF}}
)

// Objects are one label suffix's kernel objects and what removes them.
type Objects struct {
	Suffix  string
	Cleanup func(label string) error
}

var registry []Entry

// Register adds e to the table; from a backend file's init, or a test's
// (which removes it again with the function returned). A name registered
// twice is a programming error.
func Register(e Entry) (remove func()) {
	if e.Name == "" || e.Name == autoName || slices.ContainsFunc(registry, func(r Entry) bool { return r.Name == e.Name }) {
		panic("throttle: bad or duplicate backend " + e.Name)
	}
	registry = append(registry, e)
	slices.SortStableFunc(registry, func(a, b Entry) int { return cmp.Compare(a.Rank, b.Rank) })
	return func() {
		registry = slices.DeleteFunc(registry, func(r Entry) bool { return r.Name == e.Name })
	}
}

// Lookup returns the entry of name.
func Lookup(name string) (Entry, bool) {
	i := slices.IndexFunc(registry, func(r Entry) bool { return r.Name == name })
	if i < 0 {
		return Entry{}, false
	}
	return registry[i], true
}

// Entries are the table, in rank order.
func Entries() []Entry { return slices.Clone(registry) }

// autoName is the name that picks the best delay backend this kernel runs
// (Auto).
const autoName = "auto"

func cond(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// Names lists what a config's backend or --backend may name: auto, then
// every backend in the table's order.
func Names() []string { return append([]string{autoName}, namesOf(registry)...) }

// NamesWith lists the backends whose caps pass ok.
func NamesWith(ok func(Caps) bool) []string {
	return namesOf(slices.DeleteFunc(Entries(), func(r Entry) bool { return !ok(r.Caps) }))
}

// DelayNames lists the backends auto chooses from, in its order of
// preference (htb caps rates, dry-run does nothing).
func DelayNames() []string { return namesOf(autoCandidates()) }

func namesOf(es []Entry) []string {
	var out []string
	for _, r := range es {
		out = append(out, r.Name)
	}
	return out
}

func autoCandidates() []Entry {
	return slices.DeleteFunc(Entries(), func(r Entry) bool { return !r.Auto })
}

// New builds the backend name (one of Names) from o. An unknown name and
// a bad write_delay_on are refused before anything touches the kernel.
func New(name string, o Options) (Throttle, error) {
	e, ok := Lookup(name)
	if !ok && name != autoName {
		return nil, fmt.Errorf("unknown backend %q (%s)", name, strings.Join(Names(), "|"))
	}
	w, err := ParseWriteOn(o.WriteOn)
	if err != nil {
		return nil, err
	}
	if name == autoName {
		return auto(autoCandidates(), o, w)
	}
	return e.Build(o, w)
}

// Cleanup removes every kernel object any backend creates under the
// agent's label (label plus each entry's suffixes), also a crashed
// agent's: `sanqos cleanup`.
func Cleanup(label string) error {
	var errs []error
	done := map[string]bool{}
	for _, r := range registry {
		for _, o := range r.Objects {
			if !done[o.Suffix] {
				done[o.Suffix] = true
				errs = append(errs, o.Cleanup(label+o.Suffix))
			}
		}
	}
	return errors.Join(errs...)
}

// Suffixes are the label suffixes of every backend's objects, in table
// order, each once.
func Suffixes() []string {
	var out []string
	for _, r := range registry {
		for _, o := range r.Objects {
			if !slices.Contains(out, o.Suffix) {
				out = append(out, o.Suffix)
			}
		}
	}
	return out
}

// Features are the kernel features any entry needs (with either
// write_delay_on) or probes, each once, in the table's order.
func Features() []Feature {
	var out []Feature
	for _, r := range registry {
		for _, w := range []WriteOn{WriteOnReplies, WriteOnACKs} {
			for _, alts := range append(r.Needs(w), r.Probes...) {
				for _, f := range alts {
					if !slices.ContainsFunc(out, func(o Feature) bool { return o.Key == f.Key }) {
						out = append(out, f)
					}
				}
			}
		}
	}
	return out
}

// CollectorOf is the metrics collector of t's backend, or nil.
func CollectorOf(t Throttle) prometheus.Collector {
	if e, ok := Lookup(t.Name()); ok && e.Collector != nil {
		return e.Collector(t)
	}
	return nil
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
// order (auto's preference first), and marks the one auto would take
// (Choose, on the same probes).
func Backends() []Backend {
	out := make([]Backend, 0, len(registry))
	errs := map[string]error{}
	for _, r := range registry {
		ok, why, err := r.Probe()
		if err != nil {
			why, errs[r.Name] = err.Error(), err
		}
		out = append(out, Backend{Name: r.Name, About: r.About, Available: ok, Why: why})
	}
	c := Choose(func(e Entry) (bool, string, error) {
		b := out[slices.IndexFunc(out, func(b Backend) bool { return b.Name == e.Name })]
		return b.Available, b.Why, errs[e.Name]
	})
	out[slices.IndexFunc(out, func(b Backend) bool { return b.Name == c.Entry.Name })].Auto = true
	return out
}
