package throttle

// The ipset and iptables helpers that the classifier (the delay line's
// consumer sets) and the tc backends' marks (tc_mark.go) share: one way
// to create a set, to comment a rule with its label, to find and delete a
// label's rules and sets, and to call the ipset library safely.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// setKind is what a set of consumers holds: addresses of one family and,
// for the tc backends, a mark per entry (skbinfo, which `-j SET
// --map-mark` copies to the packet) and a timeout in seconds (their
// fail-open lease; 0: none).
type setKind struct {
	fam     int
	skbinfo bool
	timeout uint32
}

// createSet creates a hash:ip set through h, or through the library's
// package-level calls (a socket per call) when h is nil.
func createSet(h *netlink.Handle, name string, k setKind) error {
	o := netlink.IpsetCreateOptions{Family: unix.AF_INET, Skbinfo: k.skbinfo}
	if k.fam == 6 {
		o.Family = unix.AF_INET6
	}
	if k.timeout > 0 {
		o.Timeout = &k.timeout
	}
	create := netlink.IpsetCreate
	if h != nil {
		create = h.IpsetCreate
	}
	return ipsetCall(func() error { return create(name, "hash:ip", o) })
}

// commented is a rule's spec with "-m comment --comment comment" before
// its target ("-j" or "-g"; iptables parses target options to the end of
// the line): the label by which a restart or `sanqos cleanup` finds the
// rules of a crashed instance.
func commented(spec []string, comment string) []string {
	i := slices.IndexFunc(spec, func(a string) bool { return a == "-j" || a == "-g" })
	if i < 0 {
		i = len(spec)
	}
	return append(append(slices.Clone(spec[:i]), "-m", "comment", "--comment", comment), spec[i:]...)
}

// destroyOwnSets destroys every set whose name own claims, whichever
// instance made it; it runs after the rules that use them are gone (the
// kernel refuses to destroy a set in use).
func destroyOwnSets(own func(name string) bool) error {
	var sets []netlink.IPSetResult
	if err := ipsetCall(func() (err error) { sets, err = netlink.IpsetListAll(); return err }); err != nil {
		return fmt.Errorf("list ipsets: %w", err)
	}
	var errs []error
	for _, s := range sets {
		if own(s.SetName) {
			if err := ipsetCall(func() error { return netlink.IpsetDestroy(s.SetName) }); err != nil && !isNoSet(err) {
				errs = append(errs, fmt.Errorf("destroy ipset %s: %w", s.SetName, err))
			}
		}
	}
	return errors.Join(errs...)
}

// deleteLabelled deletes the rules of table/chain commented with label.
func deleteLabelled(ipt *iptables.IPTables, table, chain, label string) []error {
	rules, err := ipt.List(table, chain)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, r := range rules {
		f := strings.Fields(r)
		// -S output: "-A CHAIN spec...". No argument of ours has
		// spaces, so splitting on spaces is exact, but -S quotes some
		// (u32 expressions): iptables wants them bare.
		if len(f) < 3 || f[0] != "-A" || !hasComment(f, label) {
			continue
		}
		for i, a := range f {
			if len(a) >= 2 && a[0] == '"' && a[len(a)-1] == '"' {
				f[i] = a[1 : len(a)-1]
			}
		}
		if err := ipt.Delete(table, chain, f[2:]...); err != nil {
			errs = append(errs, fmt.Errorf("delete %s/%s %q: %w", table, chain, r, err))
		}
	}
	return errs
}

func hasComment(f []string, comment string) bool {
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "--comment" && strings.Trim(f[i+1], `"`) == comment {
			return true
		}
	}
	return false
}

// ipsetCall runs one vishvananda/netlink ipset call. v1.3.1 asserts every
// error to syscall.Errno and panics otherwise (e.g. on an interrupted
// dump); that must not take the agent down, so it becomes an error.
func ipsetCall(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("ipset netlink: %v", r)
		}
	}()
	return f()
}

func isNoSet(err error) bool {
	// IPSET_ERR_PROTOCOL+... : the kernel answers ENOENT for a missing set.
	return errors.Is(err, unix.ENOENT)
}

// sportMatch is iptables' match of TCP from any of ports: --sport for
// one, the multiport match for several (at most 15, which the config
// checks).
func sportMatch(ports []uint16) []string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	if len(s) == 1 {
		return []string{"-p", "tcp", "--sport", s[0]}
	}
	return []string{"-p", "tcp", "-m", "multiport", "--sports", strings.Join(s, ",")}
}
