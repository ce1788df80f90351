package throttle

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// The guards of the mark-based tc backends (guard.go): netem and HTB
// have two parts that go separately: the tree under the device's root (`tc qdisc del
// dev X root` takes all of it, classes, leaves and filters), and the
// marking (the mangle chains and the ipsets whose entries carry each
// consumer's mark: `iptables -t mangle -F` empties the chains, and drops
// the SET rules' references on the sets). Each is checked, and put back,
// on its own; the sets' entries survive a flush, and the mark lease
// re-adds any that went. (EDT's and the write caps' guards are in their
// own files.)

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
		func(set string) error { return tcCreateSet(set, true, t.cfg.TTL) })
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
		func(set string) error { return tcCreateSet(set, true, t.cfg.TTL) })
}
