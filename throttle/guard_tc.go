package throttle

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// The guards of the tc backends (guard.go). netem and HTB have two parts
// that go separately: the tree under the device's root (`tc qdisc del
// dev X root` takes all of it, classes, leaves and filters), and the
// marking (the mangle chains and the ipsets whose entries carry each
// consumer's mark: `iptables -t mangle -F` empties the chains, and drops
// the SET rules' references on the sets). Each is checked, and put back,
// on its own; the sets' entries survive a flush, and the mark lease
// re-adds any that went. EDT and the write caps hang a BPF program (and
// the write caps a redirect) from the device's clsact, and keep their
// consumers in BPF maps that nobody else can reach: what can go is fq,
// the filters with their clsact, and the write caps' IFB.

// tcGuard is what the netem and HTB guards check.
type tcGuard struct {
	label string
	dev   string
	ifidx int
	major uint16
	// sets are the sets and how many of our mangle rules use each (the
	// hook's jumps and our chains' rules: tcNetfilter.install).
	sets []tcGuardSet
}

type tcGuardSet struct {
	name  string
	rules uint32
}

func (g tcGuard) check(cc *checkConn) error {
	if err := g.checkTree(cc); err != nil {
		return err
	}
	return g.checkMarking(cc)
}

// checkTree finds our HTB root on the device.
func (g tcGuard) checkTree(cc *checkConn) error {
	h, kind, err := cc.rootQdisc(g.ifidx)
	if err != nil {
		return fmt.Errorf("root qdisc of %s: %w", g.dev, err)
	}
	if uint16(h>>16) != g.major || kind != "htb" {
		return broken("root qdisc of %s is %s %s, not sanqos' htb %x:", g.dev, kind, tcHandleString(h), g.major)
	}
	return nil
}

// checkMarking finds each set, and every rule using it.
func (g tcGuard) checkMarking(cc *checkConn) error {
	for _, set := range g.sets {
		h, err := cc.ipsetHeader(set.name)
		switch {
		case errors.Is(err, errNoSet):
			return broken("ipset %s is gone", set.name)
		case err != nil:
			return err
		case h.refs < set.rules:
			return broken("%d of the %d mangle rules using ipset %s are gone", set.rules-h.refs, set.rules, set.name)
		}
	}
	return nil
}

// repair puts back whatever of the tree and the marking is missing:
// tree builds the tree under a free root, remark re-adds the sets'
// entries, install the mangle rules. What fails is removed again, so
// nothing half-built classifies a packet (fail open), and tried again
// by the guard later.
func (g tcGuard) repair(tree func() error, remark func(), install func() error, createSet func(string) error) error {
	cc := &checkConn{}
	defer cc.close()
	var errs []error
	switch err := g.checkTree(cc); {
	case errors.Is(err, errBroken):
		errs = append(errs, g.repairTree(tree))
	case err != nil:
		errs = append(errs, err)
	}
	switch err := g.checkMarking(cc); {
	case errors.Is(err, errBroken):
		errs = append(errs, g.repairMarking(cc, remark, install, createSet))
	case err != nil:
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (g tcGuard) repairTree(build func() error) error {
	link, err := netlink.LinkByIndex(g.ifidx)
	if err != nil {
		return fmt.Errorf("device %s: %w", g.dev, err)
	}
	// A root someone else put there is their configuration: refused,
	// and reported, not replaced.
	if err := tcPrepareRoot(link, g.major); err != nil {
		return err
	}
	if err := build(); err != nil {
		return errors.Join(err, tcDeleteRoot(g.ifidx, g.major))
	}
	return nil
}

// repairMarking creates the sets that went, re-adds their entries, and
// reinstalls the mangle rules, whose install replaces whatever of ours a
// flush left in one transaction (tcNetfilter.install): no cleanup first.
func (g tcGuard) repairMarking(cc *checkConn, remark func(), install func() error, createSet func(string) error) error {
	for _, set := range g.sets {
		if _, err := cc.ipsetHeader(set.name); errors.Is(err, errNoSet) {
			if err := createSet(set.name); err != nil {
				return err
			}
		}
	}
	remark()
	if err := install(); err != nil {
		return errors.Join(err, tcCleanupNetfilter(g.label))
	}
	return nil
}

func (t *Netem) tcGuard() tcGuard {
	// r: the data chain's rule and both jumps (the second excludes r's
	// members); w: the ACK chain's rule and the second jump
	// (installRules).
	return tcGuard{label: t.cfg.Label, dev: t.cfg.Device, ifidx: t.ifidx, major: t.plan.Marks.Major,
		sets: []tcGuardSet{{tcMapSet(t.cfg.Label, "r"), 3}, {tcMapSet(t.cfg.Label, "w"), 2}}}
}

func (t *Netem) repair() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tcGuard().repair(func() error { return t.buildTree(false) }, t.remark, t.installRules,
		func(set string) error { return tcCreateSet(set, true, t.cfg.MarkTTL) })
}

func (t *HTB) tcGuard() tcGuard {
	// The hook's jump and the chain's rule (buildMarking).
	return tcGuard{label: t.cfg.Label, dev: t.cfg.Device, ifidx: t.ifidx, major: t.marks.Major,
		sets: []tcGuardSet{{tcRateSet(t.cfg.Label), 2}}}
}

func (t *HTB) repair() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tree := func() error {
		if err := t.buildTree(false); err != nil {
			return err
		}
		// The consumers' classes went with the root; their entries in
		// the set, which carry the marks, did not.
		var undo undoLog
		for a, c := range t.cur {
			if err := t.addClass(a, c, &undo); err != nil {
				return err
			}
		}
		return nil
	}
	return t.tcGuard().repair(tree, t.remark, t.buildMarking,
		func(set string) error { return tcCreateSet(set, true, t.cfg.MarkTTL) })
}

// check finds our fq at the root and the program on the egress hook.
func (e *EDT) check(cc *checkConn) error {
	idx := e.dev.Attrs().Index
	h, kind, err := cc.rootQdisc(idx)
	if err != nil {
		return fmt.Errorf("root qdisc of %s: %w", e.cfg.Device, err)
	}
	if uint16(h>>16) != e.major || kind != "fq" {
		return broken("root qdisc of %s is %s %s, not sanqos' fq %x:", e.cfg.Device, kind, tcHandleString(h), e.major)
	}
	fs, err := cc.filters(idx, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return fmt.Errorf("egress filters of %s: %w", e.cfg.Device, err)
	}
	if !hasFilter(fs, edtFilterPrio, uint32(e.major)) {
		return broken("the program's filter is gone from %s's egress (clsact deleted?)", e.cfg.Device)
	}
	return nil
}

// repair puts fq back at the root (unless someone's qdisc is there) and
// the program back on the egress hook. The consumers' delays are in the
// map, which nobody else holds: they apply again as soon as both are
// back. Either alone delays nothing (fq without stamps sends at once;
// stamps without fq are ignored), so a failure leaves no half-delay.
func (e *EDT) repair() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cc := &checkConn{}
	defer cc.close()
	idx := e.dev.Attrs().Index
	h, kind, err := cc.rootQdisc(idx)
	if err != nil {
		return err
	}
	if uint16(h>>16) != e.major || kind != "fq" {
		if err := e.fqRoot(); err != nil {
			return err
		}
	}
	fs, err := cc.filters(idx, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return err
	}
	if !hasFilter(fs, edtFilterPrio, uint32(e.major)) {
		return e.attach()
	}
	return nil
}

// check finds the IFB with our HTB root, and both filters on the
// device's ingress hook.
func (w *WriteCap) check(cc *checkConn) error {
	w.reapChecked()
	if err := w.checkIFB(cc); err != nil {
		return err
	}
	return w.checkSteering(cc)
}

func (w *WriteCap) checkIFB(cc *checkConn) error {
	h, kind, err := cc.rootQdisc(w.ifb.Attrs().Index)
	if errors.Is(err, errNoDevice) {
		return broken("IFB %s is gone", w.ifb.Attrs().Name)
	}
	if err != nil {
		return fmt.Errorf("root qdisc of %s: %w", w.ifb.Attrs().Name, err)
	}
	if uint16(h>>16) != w.major || kind != "htb" {
		return broken("root qdisc of IFB %s is %s %s, not sanqos' htb", w.ifb.Attrs().Name, kind, tcHandleString(h))
	}
	return nil
}

func (w *WriteCap) checkSteering(cc *checkConn) error {
	fs, err := cc.filters(w.dev.Attrs().Index, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return fmt.Errorf("ingress filters of %s: %w", w.cfg.Device, err)
	}
	progPrio, redirPrio := writeCapPrios(w.major)
	if !hasFilter(fs, progPrio, 1) || !hasFilter(fs, redirPrio, 0) {
		return broken("the steering filters are gone from %s's ingress (clsact deleted?)", w.cfg.Device)
	}
	return nil
}

// repair rebuilds the IFB and its tree with the current caps' classes
// if any of it went (steering off first), and the steering filters if
// they went. The map that names each capped consumer's class is ours
// alone and still holds them. On error nothing of the label's steering
// or IFB stays: writes flow uncapped until the next try.
func (w *WriteCap) repair() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cc := &checkConn{}
	defer cc.close()
	ifb := w.checkIFB(cc)
	if ifb != nil && !errors.Is(ifb, errBroken) {
		return ifb
	}
	err := func() error {
		if ifb == nil {
			if err := w.checkSteering(cc); !errors.Is(err, errBroken) {
				return err
			}
			if err := errors.Join(unsteerWriteCap(w.cfg.Label)...); err != nil {
				return err
			}
			return w.steer()
		}
		if err := CleanupWriteCap(w.cfg.Label); err != nil {
			return err
		}
		if err := w.buildIFB(); err != nil {
			return err
		}
		for a, c := range w.cur {
			if err := netlink.ClassAdd(w.class(c)); err != nil {
				return fmt.Errorf("write cap class for %v: %w", a, err)
			}
		}
		for a, d := range w.draining {
			if err := netlink.ClassAdd(w.openClass(d.minor)); err != nil {
				return fmt.Errorf("write cap class for %v (being lifted): %w", a, err)
			}
		}
		return w.steer()
	}()
	if err != nil {
		return errors.Join(err, CleanupWriteCap(w.cfg.Label))
	}
	return nil
}
