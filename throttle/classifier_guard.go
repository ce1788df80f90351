package throttle

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// A Classifier's rules and sets as its guard sees them. Every rule holds
// a reference on the set it matches, in iptables-legacy and in
// iptables-nft alike, and a flush drops the references with the rules:
// so the set's reference count (one netlink round trip per set) says
// whether its rules are still there, and its element count whether its
// members are (`ipset flush`), without running iptables.

// check reports what of the rules and sets is missing (wrapping
// errBroken), or nil.
func (c *Classifier) check(cc *checkConn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	for _, cl := range c.cfg.Classes {
		for _, fam := range c.families() {
			set := c.cfg.SetName(cl.Name, fam)
			rules := uint32(len(classAlts(cl, fam)))
			members := uint32(0)
			for _, a := range c.members[cl.Name] {
				if a.Is4() == (fam == 4) {
					members++
				}
			}
			h, err := cc.ipsetHeader(set)
			switch {
			case errors.Is(err, errNoSet):
				return broken("ipset %s is gone", set)
			case err != nil:
				return err
			case h.refs < rules:
				return broken("%d of the %d rules matching ipset %s are gone from %s/%s", rules-h.refs, rules, set, c.cfg.Table, c.cfg.Chain)
			case h.elements != members:
				return broken("ipset %s holds %d entries, not its %d consumers", set, h.elements, members)
			}
		}
	}
	return nil
}

// reinstall puts the rules and sets back as they were, members and all:
// it removes whatever of them is left, creates and fills the sets, and
// inserts the rules last, so no rule ever matches a half-filled set. On
// error it removes its rules again: no rule of a half-done reinstall
// stays, and traffic passes unthrottled until the next try.
func (c *Classifier) reinstall() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	err := c.removeOwn()
	if err == nil {
		err = c.createSets()
	}
	if err == nil {
		err = c.fill()
	}
	if err == nil {
		err = c.insertRules()
	}
	if err != nil {
		return errors.Join(err, c.removeOwn())
	}
	return nil
}

// removeOwn deletes the rules with our label from our chain (one
// iptables listing per family) and then our sets.
func (c *Classifier) removeOwn() error {
	var errs []error
	for _, fam := range c.families() {
		errs = append(errs, deleteLabelled(c.ipt[fam/6], c.cfg.Table, c.cfg.Chain, c.cfg.Label)...)
	}
	c.rules = nil
	errs = append(errs, c.destroySets()...)
	return errors.Join(errs...)
}

// fill adds every class's members to its fresh sets.
func (c *Classifier) fill() error {
	for class, addrs := range c.members {
		for _, a := range addrs {
			fam := 4
			if !a.Is4() {
				fam = 6
			}
			set := c.cfg.SetName(class, fam)
			e := &netlink.IPSetEntry{IP: net.IP(a.AsSlice())}
			if err := ipsetCall(func() error { return c.nl.IpsetAdd(set, e) }); err != nil {
				return fmt.Errorf("classifier: add %v to %s: %w", a, set, err)
			}
		}
	}
	return nil
}
