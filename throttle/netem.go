package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

func init() {
	Register(Entry{Name: "netem", Rank: 20, Auto: true, AutoHas: "netem",
		About: "kernel delay: the thesis' tree, one netem leaf per step",
		Caps:  Caps{Delay: true}, Parts: PartDevice | PartIptables,
		// Its mark rules tell pure ACKs with -m u32 (tcPureACK).
		Needs:   func(WriteOn) [][]Feature { return append([][]Feature{{netemFeature}, {kXtU32}}, needMark...) },
		Probes:  [][]Feature{{netemFeature}},
		Objects: []Objects{{"-ne", CleanupTC}},
		Probe: func() (bool, string, error) {
			ok, err := NetemAvailable()
			return ok, cond(ok, "kernel has netem", ErrNoNetem.Error()), err
		},
		Build: newNetemFrom})
}

var netemFeature = Feature{"netem", "netem qdisc", "CONFIG_NET_SCH_NETEM", "sch_netem"}

// newNetemFrom builds the netem tree. It reaches the controller's
// max_delay: with netem's own 20 ms under a 40 ms max_delay every larger
// wish failed to apply (seen in the stock-kernel guest's autonomic).
func newNetemFrom(o Options, w WriteOn) (Throttle, error) {
	c, err := o.tc("-ne")
	if err != nil {
		return nil, err
	}
	return NewNetem(NetemConfig{tcConfig: c, Chain: o.tcChain(), WriteOn: w, MaxDelay: o.MaxDelay, Step: o.Step})
}

// ErrNoNetem is returned (wrapped) when the kernel has no netem qdisc.
var ErrNoNetem = errors.New("kernel has no netem qdisc (CONFIG_NET_SCH_NETEM)")

// NetemConfig configures the netem backend, the thesis' production method
// (sections 3.2.7–3.2.8): an HTB root on the target-facing interface with
// one class per delay step, each with a netem leaf of that fixed delay,
// and a default class without delay. Each consumer's step is the
// skbinfo mark of its entry in one ipset per direction, which a single
// `-j SET --map-mark` rule copies onto its packets: a delay change is one
// netlink message, and rules and classes never change while running.
//
// The thesis kept one set and one MARK rule per step. That cost an
// iptables exec the first time each step was used and a rule per step in
// use on every packet's path; in the TCG guest the agent spent 3.8× its
// control loop's CPU on it, against 1.1× for EDT.
type NetemConfig struct {
	tcConfig
	// Chain is the mangle chain that jumps to ours: OUTPUT (target mode),
	// FORWARD (bridge mode) or POSTROUTING (default; sees both, and being
	// the last hook before the qdisc nothing can re-mark after us).
	Chain string
	// Step is the delay granularity (default 0.5 ms); delays are rounded
	// up to it.
	Step time.Duration
	// MaxDelay is the largest delay offered (default 20 ms); it sets the
	// number of steps, at most 255.
	MaxDelay time.Duration
	// MarkMask is the part of the packet mark we own (default
	// DefaultMarkMask).
	MarkMask uint32
	// Limit is each netem leaf's queue in packets (default 100000). netem
	// drops beyond it, and a 20 ms step at 10 Gbit/s holds ~17000 full
	// frames, so tc's default of 1000 would drop storage traffic.
	Limit uint32
	// WriteOn says which packets carry the write delay (replies): with
	// replies every segment but the pure ACKs takes the larger of the
	// consumer's two delays, as in the delay line.
	WriteOn WriteOn
}

func (c *NetemConfig) defaults() error {
	if err := c.tcConfig.defaults("netem"); err != nil {
		return err
	}
	c.Chain = cmp.Or(c.Chain, "POSTROUTING")
	c.Step = cmp.Or(c.Step, 500*time.Microsecond)
	c.MaxDelay = cmp.Or(c.MaxDelay, 20*time.Millisecond)
	c.MarkMask = cmp.Or(c.MarkMask, DefaultMarkMask)
	c.Limit = cmp.Or(c.Limit, 100000)
	if c.Step < time.Microsecond {
		return fmt.Errorf("netem: step %v below 1 µs (netem's resolution)", c.Step)
	}
	if c.MaxDelay >= MaxDelay || c.MaxDelay < c.Step {
		return fmt.Errorf("netem: max delay %v must be in [step, %v)", c.MaxDelay, MaxDelay)
	}
	if n := c.steps(); n > tcMaxSteps {
		return fmt.Errorf("netem: %v / %v = %d steps, at most %d", c.MaxDelay, c.Step, n, tcMaxSteps)
	}
	if err := checkMarkMask(c.MarkMask); err != nil {
		return err
	}
	if uint32(c.steps()) > (tcMarkMap{Mask: c.MarkMask}).maxField() {
		return fmt.Errorf("netem: mark mask %#x cannot number %d steps", c.MarkMask, c.steps())
	}
	return nil
}

func (c *NetemConfig) steps() int { return int((c.MaxDelay + c.Step - 1) / c.Step) }

// stepOf rounds d up to a step number; 0 means no delay.
func (c *NetemConfig) stepOf(d time.Duration) (int, error) {
	if d <= 0 {
		return 0, nil
	}
	s := int((d + c.Step - 1) / c.Step)
	if s > c.steps() {
		return 0, fmt.Errorf("delay %v above the netem backend's maximum %v", d, c.MaxDelay)
	}
	return s, nil
}

// stateOf maps a consumer's setting to its steps: a read step for the
// segments with payload (and SYN/FIN/RST), a write step for its pure ACKs.
// With WriteOnReplies the write delay rides on the segments with payload
// too, so they take the larger step and pure ACKs none.
func (c *NetemConfig) stateOf(s Setting) (netemState, error) {
	r, err := c.stepOf(s.ReadDelay)
	if err != nil {
		return netemState{}, fmt.Errorf("read %w", err)
	}
	w, err := c.stepOf(s.WriteDelay)
	if err != nil {
		return netemState{}, fmt.Errorf("write %w", err)
	}
	st := netemState{read: r, writ: w, set: Setting{ReadDelay: time.Duration(r) * c.Step, WriteDelay: time.Duration(w) * c.Step}}
	if c.WriteOn == WriteOnReplies {
		st.read, st.writ = max(r, w), 0
	}
	return st, nil
}

// netemPlan is the tc tree as objects, before anything touches the kernel;
// the unit tests compare it field by field.
type netemPlan struct {
	Root    *netlink.Htb
	Classes []*netlink.HtbClass // [0] is the default class
	Leaves  []*netlink.Netem    // Leaves[i] under Classes[i+1]
	Marks   tcMarkMap
}

const netemDefaultMinor = 1

func (c *NetemConfig) plan(ifindex int) netemPlan {
	major := tcRootMajor(c.Label)
	p := netemPlan{
		Root: tcRootQdisc(ifindex, major, netemDefaultMinor),
		// mark field s (step s) → minor s+1, as in the thesis' scripts
		// (mark 1 → class 1:2).
		Marks: tcMarkMap{Major: major, Mask: c.MarkMask, Offset: netemDefaultMinor},
	}
	root := netlink.MakeHandle(major, 0)
	// Classes must never shape: their rate is the largest we accept, so
	// the only effect of a class is its netem leaf.
	p.Classes = append(p.Classes, tcHtbClass(ifindex, netlink.MakeHandle(major, netemDefaultMinor), root, MaxRate, MaxRate, 0))
	for s := 1; s <= c.steps(); s++ {
		id := p.Marks.classID(uint32(s))
		p.Classes = append(p.Classes, tcHtbClass(ifindex, id, root, MaxRate, MaxRate, 0))
		p.Leaves = append(p.Leaves, netlink.NewNetem(
			netlink.QdiscAttrs{LinkIndex: ifindex, Parent: id, Handle: netlink.MakeHandle(tcLeafMajorBase+uint16(s), 0)},
			netlink.NetemQdiscAttrs{Latency: uint32((time.Duration(s) * c.Step).Microseconds()), Limit: c.Limit}))
	}
	return p
}

// Netem is the netem backend; see NetemConfig.
type Netem struct {
	cfg    NetemConfig
	ifidx  int
	plan   netemPlan
	filter tcFilterKind
	ipset  *ipsetConn

	mu     sync.Mutex
	cur    map[netip.Addr]netemState
	lease  *lease
	*guard // puts the tree and the marking back (Reinstalls)
}

type netemState struct {
	set        Setting // as applied (rounded up)
	read, writ int     // steps
}

// NewNetem builds the delay tree on cfg.Device. On any error everything
// built so far is removed again; without netem in the kernel the error
// wraps ErrNoNetem.
func NewNetem(cfg NetemConfig) (*Netem, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	link, err := netlink.LinkByName(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("netem: device %s: %w", cfg.Device, err)
	}
	t := &Netem{cfg: cfg, ifidx: link.Attrs().Index, cur: map[netip.Addr]netemState{}}
	t.plan = cfg.plan(t.ifidx)
	if err := CleanupTC(cfg.Label); err != nil {
		return nil, fmt.Errorf("netem: remove stale objects of label %s: %w", cfg.Label, err)
	}
	if err := tcPrepareRoot(link, t.plan.Marks.Major); err != nil {
		return nil, fmt.Errorf("netem: %w", err)
	}
	if err := t.build(); err != nil {
		t.ipset.close()
		if cerr := CleanupTC(cfg.Label); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup after failed start: %w", cerr))
		}
		return nil, fmt.Errorf("netem on %s: %w", cfg.Device, err)
	}
	cfg.Log.Info("netem throttle ready", "device", cfg.Device, "label", cfg.Label, "write_delay_on", cfg.WriteOn.String(),
		"root", tcHandleString(t.plan.Root.Handle), "steps", cfg.steps(), "step", cfg.Step,
		"filter", string(t.filter), "chain", cfg.Chain, "mark_ttl", cfg.TTL)
	t.lease = startLease(cfg.TTL, t.refresh)
	t.guard = startGuard(&guard{what: "netem", interval: cfg.Check, log: cfg.Log, check: t.tcGuard().check, repair: t.repair})
	return t, nil
}

// refresh re-adds every delayed consumer's entries, resetting their
// timeouts.
func (t *Netem) refresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.remark()
}

// remark re-adds every delayed consumer's entries; t.mu must be held.
func (t *Netem) remark() {
	for a, st := range t.cur {
		for _, m := range []struct {
			dir  string
			step int
		}{{"r", st.read}, {"w", st.writ}} {
			if m.step == 0 {
				continue
			}
			if err := t.mark(m.dir, a, m.step); err != nil {
				t.cfg.Log.Warn("netem: refreshing a consumer's mark", "consumer", a, "err", err)
			}
		}
	}
}

// mark sets a's step in direction dir: an ipset add without NLM_F_EXCL,
// which replaces the entry's skbinfo mark (and timeout) in place, so the
// consumer moves from one step to the next without passing through none.
func (t *Netem) mark(dir string, a netip.Addr, step int) error {
	return tcSetAddMark(t.ipset, tcMapSet(t.cfg.Label, dir), a, t.plan.Marks.mark(uint32(step)), t.plan.Marks.Mask)
}

func (t *Netem) build() error {
	if err := t.buildTree(true); err != nil {
		return err
	}
	return t.buildMarking()
}

// buildTree adds the root, the classes, their leaves and the filters;
// choose first finds the classifier this kernel supports (a reinstall
// reuses the one found at the start).
func (t *Netem) buildTree(choose bool) error {
	if err := netlink.QdiscAdd(t.plan.Root); err != nil {
		return fmt.Errorf("add root htb %s: %w", tcHandleString(t.plan.Root.Handle), err)
	}
	for i, c := range t.plan.Classes {
		if err := netlink.ClassAdd(c); err != nil {
			return fmt.Errorf("add class %s: %w", tcHandleString(c.Handle), err)
		}
		if i == 0 {
			continue
		}
		leaf := t.plan.Leaves[i-1]
		if err := netlink.QdiscAdd(leaf); err != nil {
			if tcKindMissing(err) {
				return fmt.Errorf("%w: %v", ErrNoNetem, err)
			}
			return fmt.Errorf("add netem %s: %w", tcHandleString(leaf.Handle), err)
		}
	}
	if choose {
		kind, err := tcChooseFilter(t.ifidx, t.plan.Marks, 1)
		if err != nil {
			return err
		}
		t.filter = kind
	}
	var fields []uint32
	for s := 1; s <= t.cfg.steps(); s++ {
		fields = append(fields, uint32(s))
	}
	for _, f := range tcFilterSpecs(t.filter, t.ifidx, t.plan.Marks, fields, tcFilterPrio) {
		if err := f.add(); err != nil {
			return err
		}
	}
	return nil
}

// buildMarking creates the two sets and installs the mangle chains that
// mark packets with their consumer's step; the tc tree that reads the
// marks must exist first.
func (t *Netem) buildMarking() error {
	c, err := newIpsetConn()
	if err != nil {
		return err
	}
	t.ipset = c
	for _, dir := range []string{"r", "w"} {
		if err := tcCreateSet(tcMapSet(t.cfg.Label, dir), true, t.cfg.TTL); err != nil {
			return err
		}
	}
	return t.installRules()
}

// installRules installs the mangle chains; the sets must exist.
func (t *Netem) installRules() error {
	nf, err := newTcNetfilter(t.cfg.Label, t.cfg.Chain, t.cfg.Device, t.cfg.Ports)
	if err != nil {
		return err
	}
	ch := tcChains(t.cfg.Label)
	r, w := tcMapSet(t.cfg.Label, "r"), tcMapSet(t.cfg.Label, "w")
	// Consumers with a read step jump once, those with only a write
	// step once: nobody passes our chains twice.
	return nf.install([][]string{jumpIfIn(r), jumpIfIn(w, r)}, netemMainRules(ch),
		[][]string{tcMapSpec(w)},
		[][]string{tcMapSpec(r)})
}

// netemMainRules send pure ACKs to the ACK chain and everything else to
// the data chain. The first is a goto: its return leaves our main chain,
// so a pure ACK is not marked again by the data chain's rules (with -j a
// consumer in both a read and a write step had its ACKs take the read
// delay).
func netemMainRules(ch []string) [][]string {
	return [][]string{
		append(append([]string{}, tcPureACK...), "-g", ch[1]),
		{"-j", ch[2]},
	}
}

func (t *Netem) Name() string { return "netem" }

// Set moves each consumer to the steps of its (rounded-up) delays: per
// direction one ipset add that replaces its entry's mark, or one del for
// no delay. Rate caps are not this backend's (ErrUnsupported); nor are
// IPv6 consumers, whose pure ACKs the IPv4 u32 test cannot recognise: the
// IPv4 consumers of a batch are applied, and the IPv6 ones it delays not
// named in a RefusedError.
func (t *Netem) Set(settings map[netip.Addr]Setting) error {
	if err := validateFor("netem", Caps{Delay: true}, settings); err != nil {
		return err
	}
	settings, refused := only4("netem", settings, func(s Setting) bool { return !s.IsZero() }, errIPv6)
	next := map[netip.Addr]netemState{}
	for a, s := range settings {
		st, err := t.cfg.stateOf(s)
		if err != nil {
			return fmt.Errorf("consumer %v: %w", a, err)
		}
		next[a.Unmap()] = st
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.apply(next); err != nil {
		return err
	}
	return refused.err()
}

// apply is all-or-nothing: every membership change is logged and undone
// in reverse if a later one fails.
func (t *Netem) apply(next map[netip.Addr]netemState) error {
	var undo undoLog
	move := func(a netip.Addr, dir string, from, to int) error {
		if from == to {
			return nil
		}
		set := tcMapSet(t.cfg.Label, dir)
		var err error
		if to != 0 {
			err = t.mark(dir, a, to)
		} else {
			err = tcSetDel(t.ipset, set, a)
		}
		if err != nil {
			return err
		}
		if from != 0 {
			undo.add(func() error { return t.mark(dir, a, from) })
		} else {
			undo.add(func() error { return tcSetDel(t.ipset, set, a) })
		}
		return nil
	}
	for a, n := range next {
		old := t.cur[a]
		if err := move(a, "r", old.read, n.read); err != nil {
			return undo.rollback(err)
		}
		if err := move(a, "w", old.writ, n.writ); err != nil {
			return undo.rollback(err)
		}
	}
	for a, n := range next {
		if n.read == 0 && n.writ == 0 {
			delete(t.cur, a)
		} else {
			t.cur[a] = n
		}
	}
	return nil
}

// List returns the delays as applied, i.e. rounded up to the step.
func (t *Netem) List() map[netip.Addr]Setting {
	return listed(&t.mu, t.cur, func(s netemState) Setting { return s.set })
}

// Close empties the sets, waits until no packet can still be inside a
// netem leaf (deleting a qdisc drops its queue, and the backend must not
// drop storage traffic), then removes every object.
func (t *Netem) Close() error {
	t.guard.end()
	t.lease.end()
	err := Clear(t)
	// After the sets are empty nothing new enters a leaf, and nothing
	// stays in one longer than the largest step.
	time.Sleep(time.Duration(t.cfg.steps())*t.cfg.Step + time.Millisecond)
	t.ipset.close()
	return errors.Join(err, CleanupTC(t.cfg.Label))
}

// NetemAvailable reports whether the kernel has the netem qdisc, by
// creating one on a veth pair in a scratch network namespace that
// disappears with the probe; nothing of the caller's namespace is touched.
func NetemAvailable() (bool, error) {
	return qdiscAvailable("netem", func(ifindex int) netlink.Qdisc {
		return netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
			netlink.NetemQdiscAttrs{Latency: 1000})
	})
}
