package throttle

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Classifier picks the packets sent from the storage port to a set of
// consumers with one iptables rule per class and family, matching an ipset
// (hash:ip) of consumer addresses. The sets of consumers and the labelled
// rules are made and cleaned up here for every backend: the Classifier
// (the delay line's queue rules) and the tc backends' marks (tc_mark.go)
// create their sets with createSet, comment their rules with commented,
// and find a crashed instance's leftovers with deleteLabelled and
// destroyOwnSets. Membership changes rewrite the set, never the rules, so
// one rule serves thousands of consumers and a controller tick costs no
// rule churn.
//
// Every kernel object is named after Config.Label: sets are
// "<label>.<class>.4" and "<label>.<class>.6", and every rule carries
// "-m comment --comment <label>". That is how CleanupClassifier finds what a
// crashed instance left behind, so one label must belong to one live
// instance at a time. NewClassifier removes stale objects with its label
// before it creates its own.
//
// A Classifier runs in the network namespace of the calling thread when it
// is created (ipsets) and when its methods run (iptables is executed), which
// for the agent is the namespace it was started in.
type Classifier struct {
	cfg     ClassifierConfig
	ipt     [2]*iptables.IPTables // [v4, v6]; v6 nil when ip6tables is absent
	nl      *netlink.Handle
	mu      sync.Mutex
	members map[string][]netip.Addr
	rules   []installedRule
	closed  bool
}

// ClassifierConfig describes the rules a Classifier installs.
type ClassifierConfig struct {
	// Label names every kernel object ([A-Za-z0-9_-], at most 20 chars).
	Label string
	// Table is the iptables table ("filter" if empty; "mangle" for MARK).
	Table string
	// Chain is OUTPUT in target mode, FORWARD (or POSTROUTING in mangle)
	// in bridge mode; default OUTPUT.
	Chain string
	// Port is the storage target's TCP port, matched as source port
	// (default 3260).
	Port uint16
	// Classes are the consumer sets, each with its own rules.
	Classes []Class
}

// Class is one consumer set and what its rules do to matching packets.
type Class struct {
	// Name distinguishes the class in set names ([A-Za-z0-9_-], at most 8).
	Name string
	// Match are alternative extra iptables match arguments after the set
	// match, per family (4, 6): one rule each, all jumping to Target, so a
	// packet matching any of them is the class's. A family without
	// entries gets one rule that matches every packet to the set.
	Match map[int][][]string
	// Target is the jump target and its options, e.g. {"NFQUEUE",
	// "--queue-num", "0", "--queue-bypass"} or {"MARK", "--set-mark", "3"}.
	// The same arguments are used for both families.
	Target []string
}

type installedRule struct {
	fam  int
	spec []string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (cfg *ClassifierConfig) fill() error {
	if !nameRE.MatchString(cfg.Label) || len(cfg.Label) > 20 {
		return fmt.Errorf("classifier label %q: want 1-20 of [A-Za-z0-9_-]", cfg.Label)
	}
	if cfg.Table == "" {
		cfg.Table = "filter"
	}
	if cfg.Chain == "" {
		cfg.Chain = "OUTPUT"
	}
	if cfg.Port == 0 {
		cfg.Port = 3260
	}
	if len(cfg.Classes) == 0 {
		return errors.New("classifier: no classes")
	}
	seen := map[string]bool{}
	for _, c := range cfg.Classes {
		if !nameRE.MatchString(c.Name) || len(c.Name) > 8 || seen[c.Name] {
			return fmt.Errorf("classifier class %q: want a unique name of 1-8 [A-Za-z0-9_-]", c.Name)
		}
		if len(c.Target) == 0 {
			return fmt.Errorf("classifier class %q: no target", c.Name)
		}
		seen[c.Name] = true
	}
	return nil
}

// SetName is the ipset holding class's consumers of family 4 or 6.
func (cfg *ClassifierConfig) SetName(class string, fam int) string {
	return fmt.Sprintf("%s.%s.%d", cfg.Label, class, fam)
}

// NewClassifier removes stale objects carrying cfg.Label, creates the
// (empty) sets and inserts the rules at the top of the chain. IPv6 rules are
// skipped when ip6tables is not installed; adding an IPv6 member then fails.
func NewClassifier(cfg ClassifierConfig) (*Classifier, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if err := CleanupClassifier(cfg.Label); err != nil {
		return nil, fmt.Errorf("classifier: removing stale %s objects: %w", cfg.Label, err)
	}
	c := &Classifier{cfg: cfg, members: map[string][]netip.Addr{}}
	var err error
	if c.ipt[0], err = iptables.NewWithProtocol(iptables.ProtocolIPv4); err != nil {
		return nil, fmt.Errorf("classifier: iptables: %w", err)
	}
	if _, lerr := exec.LookPath("ip6tables"); lerr == nil {
		if c.ipt[1], err = iptables.NewWithProtocol(iptables.ProtocolIPv6); err != nil {
			return nil, fmt.Errorf("classifier: ip6tables: %w", err)
		}
	}
	// A handle keeps one socket, opened now, for every ipset call: cheaper
	// than a socket per call, and bound to this namespace for good.
	if c.nl, err = netlink.NewHandle(unix.NETLINK_NETFILTER); err != nil {
		return nil, fmt.Errorf("classifier: netfilter netlink: %w", err)
	}
	if err := c.install(); err != nil {
		c.teardown()
		return nil, err
	}
	return c, nil
}

// HasIPv6 reports whether the classifier has IPv6 rules (ip6tables is
// installed), so that it can take IPv6 members.
func (c *Classifier) HasIPv6() bool { return c.ipt[1] != nil }

func (c *Classifier) families() []int {
	if c.ipt[1] == nil {
		return []int{4}
	}
	return []int{4, 6}
}

func (c *Classifier) createSet(name string, fam int) error {
	return createSet(c.nl, name, setKind{fam: fam})
}

func (c *Classifier) install() error {
	if err := c.createSets(); err != nil {
		return err
	}
	return c.insertRules()
}

// createSets creates every class's (empty) sets.
func (c *Classifier) createSets() error {
	for _, cl := range c.cfg.Classes {
		for _, fam := range c.families() {
			set := c.cfg.SetName(cl.Name, fam)
			if err := c.createSet(set, fam); err != nil {
				return fmt.Errorf("classifier: create ipset %s: %w", set, err)
			}
		}
	}
	return nil
}

// insertRules inserts every class's rules at the top of the chain and
// records them.
func (c *Classifier) insertRules() error {
	for _, cl := range c.cfg.Classes {
		for _, fam := range c.families() {
			for _, m := range classAlts(cl, fam) {
				spec := []string{"-p", "tcp", "--sport", strconv.Itoa(int(c.cfg.Port)),
					"-m", "set", "--match-set", c.cfg.SetName(cl.Name, fam), "dst"}
				spec = append(spec, m...)
				spec = commented(append(append(spec, "-j"), cl.Target...), c.cfg.Label)
				if err := c.ipt[fam/6].Insert(c.cfg.Table, c.cfg.Chain, 1, spec...); err != nil {
					return fmt.Errorf("classifier: insert rule in %s/%s: %w", c.cfg.Table, c.cfg.Chain, err)
				}
				c.rules = append(c.rules, installedRule{fam, spec})
			}
		}
	}
	return nil
}

// classAlts are the extra matches of cl's rules of family fam, one rule
// each.
func classAlts(cl Class, fam int) [][]string {
	if alts := cl.Match[fam]; len(alts) > 0 {
		return alts
	}
	return [][]string{nil}
}

// Update replaces the members of the named classes (classes not named keep
// theirs). All or nothing: each changed set is rebuilt as a new set and
// swapped in atomically; if any step fails, the swaps already done are
// undone and no membership has changed.
func (c *Classifier) Update(members map[string][]netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("classifier closed")
	}
	type swap struct{ live, tmp string }
	var done []swap
	var tmps []string
	defer func() {
		for _, s := range tmps {
			_ = ipsetCall(func() error { return c.nl.IpsetDestroy(s) })
		}
	}()
	undo := func() {
		for _, s := range slices.Backward(done) {
			_ = ipsetCall(func() error { return c.nl.IpsetSwap(s.live, s.tmp) })
		}
	}
	next := map[string][]netip.Addr{}
	for class, addrs := range members {
		if !slices.ContainsFunc(c.cfg.Classes, func(cl Class) bool { return cl.Name == class }) {
			undo()
			return fmt.Errorf("classifier: unknown class %q", class)
		}
		sorted := sortedUnique(addrs)
		next[class] = sorted
		if slices.Equal(sorted, c.members[class]) {
			continue
		}
		for _, fam := range []int{4, 6} {
			var want []netip.Addr
			for _, a := range sorted {
				if a.Is4() == (fam == 4) {
					want = append(want, a)
				}
			}
			var have []netip.Addr
			for _, a := range c.members[class] {
				if a.Is4() == (fam == 4) {
					have = append(have, a)
				}
			}
			if slices.Equal(want, have) {
				continue
			}
			if fam == 6 && c.ipt[1] == nil {
				undo()
				return fmt.Errorf("classifier: IPv6 consumer %v but ip6tables is not installed", want[0])
			}
			live := c.cfg.SetName(class, fam)
			tmp := live + "n"
			_ = ipsetCall(func() error { return c.nl.IpsetDestroy(tmp) }) // stale from a crash
			if err := c.createSet(tmp, fam); err != nil {
				undo()
				return fmt.Errorf("classifier: create ipset %s: %w", tmp, err)
			}
			tmps = append(tmps, tmp)
			for _, a := range want {
				e := &netlink.IPSetEntry{IP: net.IP(a.AsSlice())}
				if err := ipsetCall(func() error { return c.nl.IpsetAdd(tmp, e) }); err != nil {
					undo()
					return fmt.Errorf("classifier: add %v to %s: %w", a, tmp, err)
				}
			}
			if err := ipsetCall(func() error { return c.nl.IpsetSwap(live, tmp) }); err != nil {
				undo()
				return fmt.Errorf("classifier: swap %s: %w", live, err)
			}
			done = append(done, swap{live, tmp})
		}
	}
	for class, m := range next {
		c.members[class] = m
	}
	return nil
}

// Members returns the current members of class, sorted.
func (c *Classifier) Members(class string) []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members[class])
}

// Config returns the configuration in effect (defaults filled in).
func (c *Classifier) Config() ClassifierConfig { return c.cfg }

// Close deletes the rules, then the sets (a set in use by a rule cannot be
// destroyed). It keeps going past errors and returns them all.
func (c *Classifier) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.teardown()
}

func (c *Classifier) teardown() error {
	var errs []error
	for _, r := range slices.Backward(c.rules) {
		// A rule cannot outlive the set it references (the kernel refuses
		// to destroy a set in use), and iptables errors out on a rule
		// naming a missing set: a missing set means the rule is gone, e.g.
		// removed by CleanupClassifier.
		set := r.spec[slices.Index(r.spec, "--match-set")+1]
		if err := ipsetCall(func() error { _, err := c.nl.IpsetList(set); return err }); isNoSet(err) {
			continue
		}
		if err := c.ipt[r.fam/6].DeleteIfExists(c.cfg.Table, c.cfg.Chain, r.spec...); err != nil {
			errs = append(errs, fmt.Errorf("delete rule: %w", err))
		}
	}
	c.rules = nil
	errs = append(errs, c.destroySets()...)
	if c.nl != nil {
		c.nl.Close()
	}
	return errors.Join(errs...)
}

// destroySets destroys every set of every class (and a swap's leftover),
// once no rule uses them.
func (c *Classifier) destroySets() []error {
	var errs []error
	for _, cl := range c.cfg.Classes {
		for _, fam := range []int{4, 6} {
			for _, name := range []string{c.cfg.SetName(cl.Name, fam), c.cfg.SetName(cl.Name, fam) + "n"} {
				if err := ipsetCall(func() error { return c.nl.IpsetDestroy(name) }); err != nil && !isNoSet(err) {
					errs = append(errs, fmt.Errorf("destroy ipset %s: %w", name, err))
				}
			}
		}
	}
	return errs
}

// CleanupClassifier removes every iptables rule (any chain of the filter and
// mangle tables, both families) commented with label, then every ipset whose
// name starts with "<label>.". It is what `sanqos cleanup` and a restarting
// instance run against a crashed instance's leftovers.
func CleanupClassifier(label string) error {
	if !nameRE.MatchString(label) {
		return fmt.Errorf("cleanup: bad label %q", label)
	}
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		bin := "iptables"
		if proto == iptables.ProtocolIPv6 {
			bin = "ip6tables"
		}
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, table := range []string{"filter", "mangle"} {
			chains, err := ipt.ListChains(table)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, chain := range chains {
				errs = append(errs, deleteLabelled(ipt, table, chain, label)...)
			}
		}
	}
	errs = append(errs, destroyOwnSets(func(name string) bool { return strings.HasPrefix(name, label+".") }))
	return errors.Join(errs...)
}

func sortedUnique(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}
