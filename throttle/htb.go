package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

func init() {
	Register(Entry{Name: "htb", Rank: 40, About: "rate caps towards the consumers, no delay",
		Caps: Caps{Rate: true}, Parts: PartDevice | PartIptables,
		Needs:   func(WriteOn) [][]Feature { return needMark },
		Objects: []Objects{{"-htb", CleanupTC}},
		Probe: func() (bool, string, error) {
			ok, err := qdiscAvailable("htb", func(ifindex int) netlink.Qdisc { return tcRootQdisc(ifindex, 1, 2) })
			return ok, cond(ok, "kernel has htb", "kernel has no htb qdisc (CONFIG_NET_SCH_HTB)"), err
		},
		Build: func(o Options, _ WriteOn) (Throttle, error) {
			c, err := o.tc("-htb")
			if err != nil {
				return nil, err
			}
			return NewHTB(HTBConfig{tcConfig: c, Chain: o.tcChain()})
		}})
}

// HTBConfig configures the HTB rate backend (seed 001, chapter 3): a root
// class at the link rate, a default class that catches every packet not
// explicitly classified, and one class per capped consumer.
type HTBConfig struct {
	tcConfig
	// Chain is the mangle chain that jumps to ours (see NetemConfig.Chain).
	Chain string
	// LinkRate (bytes/s) is the root class's rate and ceil. It must not
	// exceed what the link really carries, or the queue forms in the NIC
	// instead of in HTB and shaping loses control (the "bully" effect of
	// traffic outside HTB). Default: the speed in sysfs, else MaxRate.
	LinkRate uint64
	// CeilFactor lets a consumer borrow from the parent up to
	// Rate × CeilFactor when the link has spare capacity; 1 (default)
	// makes Rate a hard cap.
	CeilFactor float64
	// Prio is the priority of consumer classes when borrowing (0 highest,
	// 7 lowest; default 1). The default class has prio 0, so unthrottled
	// traffic is served first from spare capacity.
	Prio uint32
	// MarkMask is the part of the packet mark we own (DefaultMarkMask).
	MarkMask uint32
}

// Class minors: 1 the root class, 2 the default class, consumers from
// 0x10 on. The mark field of a consumer equals its class minor.
const (
	htbRootMinor     = 1
	htbDefaultMinor  = 2
	htbFirstConsumer = 0x10
)

func (c *HTBConfig) defaults() error {
	if err := c.tcConfig.defaults("htb"); err != nil {
		return err
	}
	c.Chain = cmp.Or(c.Chain, "POSTROUTING")
	c.CeilFactor = cmp.Or(c.CeilFactor, 1)
	c.Prio = cmp.Or(c.Prio, 1)
	c.MarkMask = cmp.Or(c.MarkMask, DefaultMarkMask)
	if c.LinkRate == 0 {
		c.LinkRate = linkSpeed(c.Device)
	}
	if c.CeilFactor < 1 {
		return fmt.Errorf("htb: ceil factor %v below 1 (ceil must be ≥ rate)", c.CeilFactor)
	}
	if c.Prio > 7 {
		return fmt.Errorf("htb: prio %d above 7", c.Prio)
	}
	if c.LinkRate > MaxRate {
		return fmt.Errorf("htb: link rate %d B/s above %d", c.LinkRate, uint64(MaxRate))
	}
	if err := checkMarkMask(c.MarkMask); err != nil {
		return err
	}
	if (tcMarkMap{Mask: c.MarkMask}).maxField() < htbFirstConsumer {
		return fmt.Errorf("htb: mark mask %#x too narrow", c.MarkMask)
	}
	return nil
}

// HTB is the rate backend; see HTBConfig.
type HTB struct {
	cfg    HTBConfig
	ifidx  int
	marks  tcMarkMap
	filter tcFilterKind
	// ipset is the set's netlink socket, opened in the backend's
	// namespace, so the mark lease's goroutine (on any thread) updates
	// the right set.
	ipset *ipsetConn

	mu     sync.Mutex
	cur    map[netip.Addr]htbConsumer
	minor  map[uint16]bool // minors in use
	lease  *lease
	*guard // puts the tree and the marking back (Reinstalls)
}

type htbConsumer struct {
	minor uint16
	rate  uint64
}

// htbPlan is the fixed part of the tree, for the unit tests.
type htbPlan struct {
	Root    *netlink.Htb
	Classes []*netlink.HtbClass // root class, default class
}

func (c *HTBConfig) plan(ifindex int) htbPlan {
	major := tcRootMajor(c.Label)
	root := netlink.MakeHandle(major, htbRootMinor)
	return htbPlan{
		Root: tcRootQdisc(ifindex, major, htbDefaultMinor),
		Classes: []*netlink.HtbClass{
			tcHtbClass(ifindex, root, netlink.MakeHandle(major, 0), c.LinkRate, c.LinkRate, 0),
			tcHtbClass(ifindex, netlink.MakeHandle(major, htbDefaultMinor), root, c.LinkRate, c.LinkRate, 0),
		},
	}
}

// consumerClass is the class of a consumer capped at rate bytes/s.
func (t *HTB) consumerClass(minor uint16, rate uint64) *netlink.HtbClass {
	ceil := min(uint64(float64(rate)*t.cfg.CeilFactor), max(t.cfg.LinkRate, rate))
	return tcHtbClass(t.ifidx, netlink.MakeHandle(t.marks.Major, minor), netlink.MakeHandle(t.marks.Major, htbRootMinor), rate, ceil, t.cfg.Prio)
}

// NewHTB builds the rate tree on cfg.Device; on error nothing remains.
func NewHTB(cfg HTBConfig) (*HTB, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	link, err := netlink.LinkByName(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("htb: device %s: %w", cfg.Device, err)
	}
	major := tcRootMajor(cfg.Label)
	t := &HTB{cfg: cfg, ifidx: link.Attrs().Index, marks: tcMarkMap{Major: major, Mask: cfg.MarkMask},
		cur: map[netip.Addr]htbConsumer{}, minor: map[uint16]bool{}}
	if err := CleanupTC(cfg.Label); err != nil {
		return nil, fmt.Errorf("htb: remove stale objects of label %s: %w", cfg.Label, err)
	}
	if err := tcPrepareRoot(link, major); err != nil {
		return nil, fmt.Errorf("htb: %w", err)
	}
	if err := t.build(); err != nil {
		t.ipset.close()
		if cerr := CleanupTC(cfg.Label); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup after failed start: %w", cerr))
		}
		return nil, fmt.Errorf("htb on %s: %w", cfg.Device, err)
	}
	cfg.Log.Info("htb throttle ready", "device", cfg.Device, "label", cfg.Label,
		"root", tcHandleString(netlink.MakeHandle(major, 0)), "link_rate_Bps", cfg.LinkRate,
		"filter", string(t.filter), "chain", cfg.Chain)
	t.lease = startLease(t.cfg.TTL, t.refresh)
	t.guard = startGuard(&guard{what: "htb", interval: cfg.Check, log: cfg.Log, check: t.tcGuard().check, repair: t.repair})
	return t, nil
}

func (t *HTB) build() error {
	if err := t.buildTree(true); err != nil {
		return err
	}
	c, err := newIpsetConn()
	if err != nil {
		return err
	}
	t.ipset = c
	if err := tcCreateSet(tcRateSet(t.cfg.Label), true, t.cfg.TTL); err != nil {
		return err
	}
	return t.buildMarking()
}

// buildTree adds the root, the fixed classes and, with a bpf classifier,
// its one filter; choose first finds the classifier this kernel supports
// (a reinstall reuses the one found at the start).
func (t *HTB) buildTree(choose bool) error {
	p := t.cfg.plan(t.ifidx)
	if err := netlink.QdiscAdd(p.Root); err != nil {
		return fmt.Errorf("add root htb: %w", err)
	}
	for _, c := range p.Classes {
		if err := netlink.ClassAdd(c); err != nil {
			return fmt.Errorf("add class %s: %w", tcHandleString(c.Handle), err)
		}
	}
	if choose {
		kind, err := tcChooseFilter(t.ifidx, t.marks, htbDefaultMinor)
		if err != nil {
			return err
		}
		t.filter = kind
	}
	if t.filter == tcBPF {
		if err := tcFilterSpecs(t.filter, t.ifidx, t.marks, nil, tcFilterPrio)[0].add(); err != nil {
			return err
		}
	}
	return nil
}

// buildMarking installs the mangle rule that marks packets from the set.
// One rule for all consumers: each set member carries its own mark
// (ipset skbinfo), so adding a consumer is one ipset add.
func (t *HTB) buildMarking() error {
	nf, err := newTcNetfilter(t.cfg.Label, t.cfg.Chain, t.cfg.Device, t.cfg.Ports)
	if err != nil {
		return err
	}
	set := tcRateSet(t.cfg.Label)
	return nf.install([][]string{jumpIfIn(set)}, [][]string{tcMapSpec(set)})
}

func (t *HTB) Name() string { return "htb" }

func (t *HTB) maxMinor() uint16 {
	m := min(t.marks.maxField(), 0xfffe)
	if t.filter == tcU32Mark {
		m = min(m, 0xfff) // u32 node ids
	}
	return uint16(m)
}

func (t *HTB) allocMinor() (uint16, error) {
	for m := uint16(htbFirstConsumer); m <= t.maxMinor(); m++ {
		if !t.minor[m] {
			return m, nil
		}
	}
	return 0, fmt.Errorf("htb: all %d consumer classes in use", t.maxMinor()-htbFirstConsumer+1)
}

// Set caps each consumer at its Rate; a changed rate is one class change
// (no teardown, so the consumer's queue and TCP state survive); Rate 0
// removes the consumer. Delays are not this backend's (ErrUnsupported).
func (t *HTB) Set(settings map[netip.Addr]Setting) error {
	if err := validateFor("htb", Caps{Rate: true}, settings); err != nil {
		return err
	}
	// An IPv6 consumer is left uncapped and named in the error; the
	// others' caps go ahead.
	settings, refused := only4("htb", settings, func(s Setting) bool { return s.Rate != 0 }, errIPv6)
	next := map[netip.Addr]uint64{}
	for a, s := range settings {
		next[a] = s.Rate
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.apply(next); err != nil {
		return err
	}
	return refused.err()
}

func (t *HTB) apply(next map[netip.Addr]uint64) error {
	var undo undoLog
	done := map[netip.Addr]htbConsumer{}
	for a, rate := range next {
		old, had := t.cur[a]
		switch {
		case had && rate == old.rate:
			done[a] = old
		case had && rate != 0:
			if err := netlink.ClassChange(t.consumerClass(old.minor, rate)); err != nil {
				return undo.rollback(fmt.Errorf("htb: change class of %v: %w", a, err))
			}
			undo.add(func() error { return netlink.ClassChange(t.consumerClass(old.minor, old.rate)) })
			done[a] = htbConsumer{old.minor, rate}
		case had:
			if err := t.remove(a, old); err != nil {
				return undo.rollback(err)
			}
			undo.add(func() error { return t.add(a, old) })
		case rate != 0:
			m, err := t.allocMinor()
			if err != nil {
				return undo.rollback(err)
			}
			c := htbConsumer{m, rate}
			if err := t.add(a, c); err != nil {
				return undo.rollback(err)
			}
			undo.add(func() error { return t.remove(a, c) })
			done[a] = c
		}
	}
	for a := range next {
		if c, ok := done[a]; ok {
			t.cur[a] = c
		} else {
			delete(t.cur, a)
		}
	}
	return nil
}

// add creates class, filter (fw/u32 only) and set member, in that order, so
// the mark never points at a missing class. On error it undoes itself.
func (t *HTB) add(a netip.Addr, c htbConsumer) (err error) {
	t.minor[c.minor] = true
	var undo undoLog
	defer func() {
		if err != nil {
			err = undo.rollback(err)
			delete(t.minor, c.minor)
		}
	}()
	if err := t.addClass(a, c, &undo); err != nil {
		return err
	}
	return tcSetAddMark(t.ipset, tcRateSet(t.cfg.Label), a, t.marks.mark(uint32(c.minor)), t.marks.Mask)
}

// addClass adds a consumer's class, its leaf and (fw/u32) its filter,
// logging in undo how to take them away.
func (t *HTB) addClass(a netip.Addr, c htbConsumer, undo *undoLog) error {
	cl := t.consumerClass(c.minor, c.rate)
	if err := netlink.ClassAdd(cl); err != nil {
		return fmt.Errorf("htb: add class for %v: %w", a, err)
	}
	undo.add(func() error { return netlink.ClassDel(cl) })
	// The leaf goes with its class (deleting the class deletes it); handle
	// 0 lets the kernel pick a major no other qdisc uses.
	if err := tcAddFifoLeaf(t.ifidx, cl.Handle, 0, tcLeafBytes); err != nil {
		return err
	}
	if t.filter != tcBPF {
		f := tcFilterFor(t.filter, t.ifidx, t.marks, uint32(c.minor), tcFilterPrio)
		if err := f.add(); err != nil {
			return err
		}
		undo.add(f.del)
	}
	return nil
}

// remove undoes add in reverse without dropping what the class still
// queues (deleting a class drops its queue, which TCP would have to
// resend): the class is first opened to the link rate so its queue
// drains, then unmarked, so no packet is classified into a class that is
// about to go, and deleted once empty.
func (t *HTB) remove(a netip.Addr, c htbConsumer) error {
	fast := t.consumerClass(c.minor, max(t.cfg.LinkRate, c.rate))
	if err := netlink.ClassChange(fast); err != nil {
		return fmt.Errorf("htb: open class of %v: %w", a, err)
	}
	// A class waiting for tokens at its old rate keeps waiting after the
	// change, up to one packet's time at that rate (64 KiB at 512 KiB/s:
	// 125 ms; writecap_handover.go), and only then drains.
	within := 100*time.Millisecond + time.Duration(float64(time.Second)*float64(64<<10)/float64(max(c.rate, 1)))
	tcWaitEmpty(t.ifidx, min(within, 2*time.Second), fast.Handle)
	if err := tcSetDel(t.ipset, tcRateSet(t.cfg.Label), a); err != nil {
		return err
	}
	tcWaitEmpty(t.ifidx, 100*time.Millisecond, fast.Handle)
	if t.filter != tcBPF {
		if err := tcFilterFor(t.filter, t.ifidx, t.marks, uint32(c.minor), tcFilterPrio).del(); err != nil {
			return err
		}
	}
	if err := netlink.ClassDel(fast); err != nil {
		return fmt.Errorf("htb: delete class of %v: %w", a, err)
	}
	delete(t.minor, c.minor)
	return nil
}

// tcWaitEmpty polls the queue lengths of classes on a device until all
// are empty, for at most within: opened to the link rate, even a full
// leaf drains in a fraction of 100 ms once its class may send.
func tcWaitEmpty(ifidx int, within time.Duration, handles ...uint32) {
	link, err := netlink.LinkByIndex(ifidx)
	if err != nil || len(handles) == 0 {
		return
	}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); {
		qlen, err := tcClassQlens(link)
		if err != nil || !slices.ContainsFunc(handles, func(h uint32) bool { return qlen[h] > 0 }) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// tcClassQlens is each class's queue length (packets) on link, by handle.
func tcClassQlens(link netlink.Link) (map[uint32]uint32, error) {
	cls, err := netlink.ClassList(link, netlink.HANDLE_NONE)
	if err != nil {
		return nil, err
	}
	qlen := make(map[uint32]uint32, len(cls))
	for _, k := range cls {
		if s := k.Attrs().Statistics; s != nil && s.Queue != nil {
			qlen[k.Attrs().Handle] = s.Queue.Qlen
		}
	}
	return qlen, nil
}

func (t *HTB) List() map[netip.Addr]Setting {
	return listed(&t.mu, t.cur, func(c htbConsumer) Setting { return Setting{Rate: c.rate} })
}

// refresh re-adds every capped consumer, resetting its entry's timeout.
func (t *HTB) refresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.remark()
}

// remark re-adds every capped consumer's entry; t.mu must be held.
func (t *HTB) remark() {
	for a, c := range t.cur {
		if err := tcSetAddMark(t.ipset, tcRateSet(t.cfg.Label), a, t.marks.mark(uint32(c.minor)), t.marks.Mask); err != nil {
			t.cfg.Log.Warn("htb: refreshing a consumer's mark", "consumer", a, "err", err)
		}
	}
}

// Close deletes the root qdisc it created (and with it every class and
// filter), the rules and the set.
func (t *HTB) Close() error {
	t.guard.end()
	t.lease.end()
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.cur)
	clear(t.minor)
	t.ipset.close()
	return CleanupTC(t.cfg.Label)
}
