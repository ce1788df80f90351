package throttle

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// queueRules send the packets from the storage port to the delay line's
// consumers into its NFQUEUE: per family an ipset (hash:ip) of the
// consumers, "<label>.q.4" and "<label>.q.6", and the filter rules that
// match it (one per alternative of match), each commented with the label
// so that cleanupQueueRules finds what a crashed instance left. A
// membership change edits the live set (a few members) or swaps in a
// rebuilt one (update), and never touches the rules, so one rule serves
// thousands of consumers and a tick costs no rule churn. The sets and the labelled rules are made and removed with
// netfilter_objects.go's helpers, as the tc backends' marks are.
//
// It works in the network namespace of the calling thread when it is
// created (ipsets) and when its methods run (iptables is executed): the
// agent's.
type queueRules struct {
	label, chain string
	ports        []uint16
	match        map[int][][]string // per family: alternative extra matches, one rule each
	target       []string
	ipt          [2]*iptables.IPTables // [v4, v6]; v6 nil when ip6tables is absent
	nl           *netlink.Handle
	mu           sync.Mutex
	members      []netip.Addr // sorted
	// batch adds and deletes members, many to a system call; edits is
	// its run (tests make steps fail).
	batch  *ipsetBatcher
	edits  func([]ipsetStep) []error
	rules  []installedRule
	closed bool
}

type installedRule struct {
	fam  int
	spec []string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (q *queueRules) setName(fam int) string { return fmt.Sprintf("%s.q.%d", q.label, fam) }

// newQueueRules removes stale objects carrying label, creates the (empty)
// sets and inserts the rules at the top of chain. IPv6 rules are skipped
// when ip6tables is not installed; an IPv6 member is then refused.
func newQueueRules(label, chain string, ports []uint16, match map[int][][]string, target []string) (*queueRules, error) {
	if err := cleanupQueueRules(label); err != nil {
		return nil, fmt.Errorf("removing stale %s objects: %w", label, err)
	}
	q := &queueRules{label: label, chain: chain, ports: ports, match: match, target: target}
	var err error
	if q.ipt[0], err = iptables.NewWithProtocol(iptables.ProtocolIPv4); err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	if _, lerr := exec.LookPath("ip6tables"); lerr == nil {
		if q.ipt[1], err = iptables.NewWithProtocol(iptables.ProtocolIPv6); err != nil {
			return nil, fmt.Errorf("ip6tables: %w", err)
		}
	}
	// A handle keeps one socket, opened now, for every ipset call: cheaper
	// than a socket per call, and bound to this namespace for good.
	if q.nl, err = netlink.NewHandle(unix.NETLINK_NETFILTER); err != nil {
		return nil, fmt.Errorf("netfilter netlink: %w", err)
	}
	if q.batch, err = newIpsetBatcher(); err != nil {
		q.nl.Close()
		return nil, err
	}
	q.edits = q.batch.run
	if err = q.createSets(); err == nil {
		err = q.insertRules()
	}
	if err != nil {
		return nil, errors.Join(err, q.teardown())
	}
	return q, nil
}

// hasIPv6 reports whether there are IPv6 rules (ip6tables is installed),
// so that IPv6 members can be queued.
func (q *queueRules) hasIPv6() bool { return q.ipt[1] != nil }

func (q *queueRules) families() []int {
	if q.ipt[1] == nil {
		return []int{4}
	}
	return []int{4, 6}
}

// createSets creates the (empty) sets.
func (q *queueRules) createSets() error {
	for _, fam := range q.families() {
		if err := createSet(q.nl, q.setName(fam), setKind{fam: fam}); err != nil {
			return fmt.Errorf("create ipset %s: %w", q.setName(fam), err)
		}
	}
	return nil
}

// alts are the extra matches of the rules of family fam, one rule each.
func (q *queueRules) alts(fam int) [][]string {
	if alts := q.match[fam]; len(alts) > 0 {
		return alts
	}
	return [][]string{nil}
}

// insertRules inserts the rules at the top of the chain and records them.
func (q *queueRules) insertRules() error {
	for _, fam := range q.families() {
		for _, m := range q.alts(fam) {
			spec := append(sportMatch(q.ports), "-m", "set", "--match-set", q.setName(fam), "dst")
			spec = commented(append(append(append(spec, m...), "-j"), q.target...), q.label)
			if err := q.ipt[fam/6].Insert("filter", q.chain, 1, spec...); err != nil {
				return fmt.Errorf("insert rule in filter/%s: %w", q.chain, err)
			}
			q.rules = append(q.rules, installedRule{fam, spec})
		}
	}
	return nil
}

// ofFamily are the addresses of family fam in addrs.
func ofFamily(addrs []netip.Addr, fam int) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if a.Is4() == (fam == 4) {
			out = append(out, a)
		}
	}
	return out
}

// update adds and deletes members. All or nothing. A change of a few
// members is made in the live sets, a netlink message per member changed
// sent in batches (patch): a tick that slows one more consumer among
// 10,000 no longer rebuilds a set of 10,000. A patch that fails is undone and the
// update falls back to the rebuild, which a set that starts empty (a
// restart's resync) or changes in more than half its members takes at
// once: each changed set is rebuilt as a new set and swapped in
// atomically; if any step fails, the swaps already done are undone and
// no membership has changed. Between a patch's messages a packet may
// find some members changed and others not yet, each either as before or
// as after.
func (q *queueRules) update(add, del []netip.Addr) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errors.New("queue rules closed")
	}
	add, del = sortedUnique(add), sortedUnique(del)
	next := merged(q.members, add, del)
	if q.patch(add, del) {
		q.members = next
		return nil
	}
	return q.rebuild(next)
}

// merged is members (sorted) with add's and without del's (both
// sorted), in one pass.
func merged(members, add, del []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(members)+len(add))
	i, j := 0, 0
	for _, m := range members {
		for ; i < len(add) && add[i].Less(m); i++ {
			out = append(out, add[i])
		}
		if i < len(add) && add[i] == m {
			i++ // a member already
		}
		for ; j < len(del) && del[j].Less(m); j++ {
		}
		if j < len(del) && del[j] == m {
			continue
		}
		out = append(out, m)
	}
	return append(out, add[i:]...)
}

// patch edits the live sets, adding add and deleting del (sorted), in a
// batch of netlink messages, and reports whether it did; where it would
// not (a set empty or more than half changed, IPv6 without ip6tables) or
// a step failed, the live sets are as before (the steps made are undone).
func (q *queueRules) patch(add, del []netip.Addr) bool {
	var steps []ipsetStep
	for _, fam := range []int{4, 6} {
		a, d := ofFamily(add, fam), ofFamily(del, fam)
		if len(a)+len(d) == 0 {
			continue
		}
		have := 0
		for _, m := range q.members {
			if m.Is4() == (fam == 4) {
				have++
			}
		}
		if have == 0 || 2*(len(a)+len(d)) > 2*have+len(a)-len(d) || fam == 6 && q.ipt[1] == nil {
			return false
		}
		for _, x := range d {
			steps = append(steps, ipsetStep{q.setName(fam), x, false})
		}
		for _, x := range a {
			steps = append(steps, ipsetStep{q.setName(fam), x, true})
		}
	}
	var undo []ipsetStep
	for i, err := range q.edits(steps) {
		if err == nil {
			undo = append(undo, ipsetStep{steps[i].set, steps[i].a, !steps[i].add})
		}
	}
	if len(undo) == len(steps) {
		return true
	}
	q.batch.run(undo) // best effort; the guard counts the members
	return false
}

// rebuild makes each changed set anew and swaps it in (update).
func (q *queueRules) rebuild(next []netip.Addr) error {
	var done, tmps []string
	defer func() {
		for _, s := range tmps {
			_ = ipsetCall(func() error { return q.nl.IpsetDestroy(s) })
		}
	}()
	fail := func(err error) error {
		for _, live := range slices.Backward(done) {
			_ = ipsetCall(func() error { return q.nl.IpsetSwap(live, live+"n") })
		}
		return err
	}
	for _, fam := range []int{4, 6} {
		want := ofFamily(next, fam)
		if slices.Equal(want, ofFamily(q.members, fam)) {
			continue
		}
		if fam == 6 && q.ipt[1] == nil {
			return fail(fmt.Errorf("IPv6 consumer %v but ip6tables is not installed", want[0]))
		}
		live := q.setName(fam)
		tmp := live + "n"
		_ = ipsetCall(func() error { return q.nl.IpsetDestroy(tmp) }) // stale from a crash
		if err := createSet(q.nl, tmp, setKind{fam: fam}); err != nil {
			return fail(fmt.Errorf("create ipset %s: %w", tmp, err))
		}
		tmps = append(tmps, tmp)
		if err := q.add(tmp, want); err != nil {
			return fail(err)
		}
		if err := ipsetCall(func() error { return q.nl.IpsetSwap(live, tmp) }); err != nil {
			return fail(fmt.Errorf("swap %s: %w", live, err))
		}
		done = append(done, live)
	}
	q.members = next
	return nil
}

// add adds addrs to set, in batches.
func (q *queueRules) add(set string, addrs []netip.Addr) error {
	steps := make([]ipsetStep, len(addrs))
	for i, a := range addrs {
		steps[i] = ipsetStep{set, a, true}
	}
	for _, err := range q.edits(steps) {
		if err != nil {
			return err // the first; the rest are likely the same
		}
	}
	return nil
}

// close deletes the rules, then the sets (a set in use by a rule cannot
// be destroyed). It keeps going past errors and returns them all.
func (q *queueRules) close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	return q.teardown()
}

func (q *queueRules) teardown() error {
	var errs []error
	for _, r := range slices.Backward(q.rules) {
		// A rule cannot outlive the set it references (the kernel refuses
		// to destroy a set in use), and iptables errors out on a rule
		// naming a missing set: a missing set means the rule is gone, e.g.
		// removed by cleanupQueueRules.
		set := r.spec[slices.Index(r.spec, "--match-set")+1]
		if err := ipsetCall(func() error { _, err := q.nl.IpsetList(set); return err }); isNoSet(err) {
			continue
		}
		if err := q.ipt[r.fam/6].DeleteIfExists("filter", q.chain, r.spec...); err != nil {
			errs = append(errs, fmt.Errorf("delete rule: %w", err))
		}
	}
	q.rules = nil
	errs = append(errs, q.destroySets()...)
	if q.nl != nil {
		q.nl.Close()
	}
	if q.batch != nil {
		q.batch.close()
	}
	return errors.Join(errs...)
}

// destroySets destroys both families' sets (and a swap's leftovers),
// once no rule uses them.
func (q *queueRules) destroySets() []error {
	var errs []error
	for _, fam := range []int{4, 6} {
		for _, name := range []string{q.setName(fam), q.setName(fam) + "n"} {
			if err := ipsetCall(func() error { return q.nl.IpsetDestroy(name) }); err != nil && !isNoSet(err) {
				errs = append(errs, fmt.Errorf("destroy ipset %s: %w", name, err))
			}
		}
	}
	return errs
}

// cleanupQueueRules removes every iptables rule (any chain of the filter
// table, both families) commented with label, then every ipset whose name
// starts with "<label>.": a crashed instance's leftovers.
func cleanupQueueRules(label string) error {
	if !nameRE.MatchString(label) {
		return fmt.Errorf("cleanup: bad label %q", label)
	}
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		if _, err := exec.LookPath(map[iptables.Protocol]string{iptables.ProtocolIPv4: "iptables", iptables.ProtocolIPv6: "ip6tables"}[proto]); err != nil {
			continue
		}
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		chains, err := ipt.ListChains("filter")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, chain := range chains {
			errs = append(errs, deleteLabelled(ipt, "filter", chain, label)...)
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

// The guard's view (guard.go). Every rule holds a reference on the set it
// matches, in iptables-legacy and in iptables-nft alike, and a flush
// drops the references with the rules: so the set's reference count (one
// netlink round trip per set) says whether its rules are still there,
// and its element count whether its members are (`ipset flush`),
// without running iptables.

// check reports what of the rules and sets is missing (wrapping
// errBroken), or nil.
func (q *queueRules) check(cc *checkConn) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	for _, fam := range q.families() {
		set, rules, members := q.setName(fam), uint32(len(q.alts(fam))), uint32(len(ofFamily(q.members, fam)))
		h, err := cc.ipsetHeader(set)
		switch {
		case errors.Is(err, errNoSet):
			return broken("ipset %s is gone", set)
		case err != nil:
			return err
		case h.refs < rules:
			return broken("%d of the %d rules matching ipset %s are gone from filter/%s", rules-h.refs, rules, set, q.chain)
		case h.elements != members:
			return broken("ipset %s holds %d entries, not its %d consumers", set, h.elements, members)
		}
	}
	return nil
}

// reinstall puts the rules and sets back as they were, members and all:
// it removes whatever of them is left, creates and fills the sets, and
// inserts the rules last, so no rule ever matches a half-filled set. On
// error it removes its rules again: no rule of a half-done reinstall
// stays, and traffic passes unthrottled until the next try.
func (q *queueRules) reinstall() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	err := q.removeOwn()
	if err == nil {
		err = q.createSets()
	}
	for _, fam := range q.families() {
		if err == nil {
			err = q.add(q.setName(fam), ofFamily(q.members, fam))
		}
	}
	if err == nil {
		err = q.insertRules()
	}
	if err != nil {
		return errors.Join(err, q.removeOwn())
	}
	return nil
}

// removeOwn deletes the rules with our label from our chain (one
// iptables listing per family) and then our sets.
func (q *queueRules) removeOwn() error {
	var errs []error
	for _, fam := range q.families() {
		errs = append(errs, deleteLabelled(q.ipt[fam/6], "filter", q.chain, q.label)...)
	}
	q.rules = nil
	errs = append(errs, q.destroySets()...)
	return errors.Join(errs...)
}
