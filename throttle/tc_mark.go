package throttle

// Netfilter side of the tc backends: the mangle rules and ipsets that put
// a mark on each packet towards a throttled consumer. The sets of
// consumers and the labelled rules are netfilter_objects.go's (createSet,
// commented, deleteLabelled, destroyOwnSets), as for the delay line; what
// is the tc backends' own is the shape, which the delay line's queueRules
// and swapped sets cannot take without changing what the kernel does:
// each entry carries its consumer's mark (skbinfo) and a timeout that a
// lease refreshes, so the marks fail open within a TTL of the agent's
// death; entries change one at a time, with their marks, rather than by a
// set swap; and the rules sit in chains of their own behind one jump, so
// the pure-ACK split is a goto.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const tcTable = "mangle"

// tcPureACK selects TCP segments without payload (pure ACKs), by three
// tests that hold for any header sizes:
//
//   - flags: ACK without SYN/FIN/RST, so connection setup and teardown stay
//     in order with the data they belong to;
//   - "! payload ≥ 4 bytes": xt_u32 fails a 4-byte read past the end of
//     the packet, and the read starts at IHL*4 + doff*4, the payload;
//   - "IP total length ≡ 0 (mod 4)": both header lengths are multiples of
//     4, so among packets with < 4 payload bytes only the empty ones pass.
//
// `-m length --length 0:N` (the thesis' way) breaks as soon as TCP options
// change the header size (timestamps, SACK blocks), and then a data
// segment that gets the ACK delay is reordered behind its successors,
// which TCP answers with duplicate ACKs and fast retransmits.
var tcPureACK = []string{
	"-p", "tcp", "--tcp-flags", "SYN,FIN,RST,ACK", "ACK",
	"-m", "u32", "!", "--u32", "0>>22&0x3C@12>>26&0x3C@0=0:4294967295",
	"-m", "u32", "--u32", "0&0x3=0",
}

// tcComment labels every rule we add, so CleanupTC finds them after a
// crash.
func tcComment(label string) string { return "sanqos-tc:" + label }

// tcChains are the chains of an instance; the first is the one the hook
// jumps to.
func tcChains(label string) []string {
	return []string{label + "-tc", label + "-tc-ack", label + "-tc-data"}
}

// tcNetfilter owns an instance's chains and rules in the mangle table.
type tcNetfilter struct {
	label string
	hook  string // built-in mangle chain that jumps to ours
	dev   string
	ports []uint16
}

func newTcNetfilter(label, hook, dev string, ports []uint16) (*tcNetfilter, error) {
	switch hook {
	case "OUTPUT", "FORWARD", "POSTROUTING":
	default:
		return nil, fmt.Errorf("chain %q: want OUTPUT (target mode), FORWARD (bridge mode) or POSTROUTING (both)", hook)
	}
	return &tcNetfilter{label: label, hook: hook, dev: dev, ports: ports}, nil
}

// jumpSpec is a jump from the hook into our first chain for the packets
// that also match m.
func (n *tcNetfilter) jumpSpec(m []string) []string {
	s := []string{"-o", n.dev}
	if len(n.ports) > 0 {
		s = append(s, sportMatch(n.ports)...)
	}
	s = append(s, m...)
	return append(s, "-m", "comment", "--comment", tcComment(n.label), "-j", tcChains(n.label)[0])
}

// jumpIfIn is a jump's match for packets to a member of set and, with
// not, to no member of not.
func jumpIfIn(set string, not ...string) []string {
	m := []string{"-m", "set", "--match-set", set, "dst"}
	for _, s := range not {
		m = append(m, "-m", "set", "!", "--match-set", s, "dst")
	}
	return m
}

// install puts our chains with rules[i] in chain i (tcChains) and the
// jumps from the hook (one per entry of jumps, each with its extra match)
// in place, replacing whatever of the label's is there: a crashed
// instance's rules, or what a flush left (our chains without the hook's
// jump, or emptied). It is one iptables-restore --noflush transaction:
// declaring our chains creates them or empties them, the label's rules
// in any other chain are deleted, and the rules and jumps appended; the
// kernel takes all of it at once, so traffic never enters a half-built
// chain, and a failed install changes nothing.
//
// It runs two programs, iptables-save and iptables-restore. The guard's
// repair used to remove and re-add chain by chain and rule by rule: about
// twenty iptables runs (a listing per hook, three per chain to delete),
// which at 100–300 ms each under the stock-kernel guest's emulated CPU
// left traffic unthrottled for several seconds after a flush.
//
// The jumps match the consumers' sets, so only their packets enter our
// chains, and every rule of ours holds a reference on a set: a flush of
// the hook or of our chains shows in the sets' reference counts, which
// the guard reads over netlink (guard_tc.go).
func (n *tcNetfilter) install(jumps [][]string, rules ...[][]string) error {
	chains := tcChains(n.label)
	if len(rules) > len(chains) {
		return fmt.Errorf("rules for %d chains, have %d", len(rules), len(chains))
	}
	var stderr strings.Builder
	save := exec.Command("iptables-save", "-t", tcTable)
	save.Stderr = &stderr
	saved, err := save.Output()
	if err != nil {
		return fmt.Errorf("iptables-save -t %s: %w: %s", tcTable, err, strings.TrimSpace(stderr.String()))
	}
	var in strings.Builder
	fmt.Fprintf(&in, "*%s\n", tcTable)
	for _, c := range chains {
		fmt.Fprintf(&in, ":%s - [0:0]\n", c)
	}
	for _, r := range tcLabelledRules(string(saved), n.label) {
		fmt.Fprintf(&in, "-D %s\n", r)
	}
	for i, rs := range rules {
		for _, r := range rs {
			if err := restoreRule(&in, chains[i], commented(r, tcComment(n.label))); err != nil {
				return err
			}
		}
	}
	for _, m := range jumps {
		if err := restoreRule(&in, n.hook, n.jumpSpec(m)); err != nil {
			return err
		}
	}
	in.WriteString("COMMIT\n")
	restore := exec.Command("iptables-restore", "--noflush", "--wait")
	restore.Stdin = strings.NewReader(in.String())
	if out, err := restore.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore of %s's chains %v and %s jumps: %w: %s", tcTable, chains, n.hook, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// tcLabelledRules are the rules of label in iptables-save output outside
// our own chains (install empties those): "CHAIN spec", quoted as
// iptables-save quotes it, which iptables-restore reads back.
func tcLabelledRules(saved, label string) []string {
	var rs []string
	for _, l := range strings.Split(saved, "\n") {
		r, ok := strings.CutPrefix(l, "-A ")
		if !ok || !hasComment(strings.Fields(r), tcComment(label)) {
			continue
		}
		if chain, _, _ := strings.Cut(r, " "); !slices.Contains(tcChains(label), chain) {
			rs = append(rs, r)
		}
	}
	return rs
}

// restoreRule writes "-A chain spec" to in. iptables-restore splits its
// lines at blanks and reads quotes and backslashes, which none of our
// arguments has; one that had would be refused rather than misread.
func restoreRule(in *strings.Builder, chain string, spec []string) error {
	for _, a := range spec {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") {
			return fmt.Errorf("rule in %s: argument %q cannot go through iptables-restore", chain, a)
		}
	}
	fmt.Fprintf(in, "-A %s %s\n", chain, strings.Join(spec, " "))
	return nil
}

// tcCleanupNetfilter removes the hook jumps and chains of label, whoever
// created them (this process or a crashed one).
func tcCleanupNetfilter(label string) error {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return fmt.Errorf("iptables: %w", err)
	}
	var errs []error
	for _, hook := range []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"} {
		errs = append(errs, deleteLabelled(ipt, tcTable, hook, tcComment(label))...)
	}
	chains, err := ipt.ListChains(tcTable)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, c := range tcChains(label) {
		if slices.Contains(chains, c) {
			if err := ipt.ClearAndDeleteChain(tcTable, c); err != nil {
				errs = append(errs, fmt.Errorf("delete chain %s: %w", c, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Set names, each member carrying its mark (skbinfo): <label>-r (netem:
// segments with payload), <label>-w (netem: pure ACKs), <label>-rate (HTB
// consumers).
func tcMapSet(label, dir string) string { return label + "-" + dir }
func tcRateSet(label string) string     { return label + "-rate" }

// tcOwnSet also matches label-r-N and label-w-N, the per-step sets of
// netem before it marked through one set per direction, so a restart
// after an upgrade still removes what a crashed older agent left.
func tcOwnSet(label, name string) bool {
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(label) + `-(([wr](-[0-9]+)?)|rate)$`)
	return re.MatchString(name)
}

// tcMapSpec copies the skbinfo mark of the packet's destination's entry
// in set onto the packet; packets to non-members pass unmarked.
func tcMapSpec(set string) []string {
	return []string{"-j", "SET", "--map-set", set, "dst", "--map-mark"}
}

// DefaultMarkTTL is how long a consumer's set membership (and so its mark,
// its delay or its rate cap) outlives the last refresh. The tc backends
// refresh every member three times per TTL while they run; when the agent
// dies, nothing refreshes, the kernel lets the entries expire and the
// consumers' traffic goes to the default class: netem and HTB fail open
// within the TTL, as the delay line does at once with --queue-bypass.
const DefaultMarkTTL = time.Second

// ttlSeconds is ipset's timeout for ttl: whole seconds, at least 1.
func ttlSeconds(ttl time.Duration) uint32 {
	return uint32(max(1, (ttl+time.Second-1)/time.Second))
}

func tcCreateSet(name string, skbinfo bool, ttl time.Duration) error {
	if err := createSet(nil, name, setKind{fam: 4, skbinfo: skbinfo, timeout: ttlSeconds(ttl)}); err != nil {
		return fmt.Errorf("create ipset %s: %w", name, err)
	}
	return nil
}

func tcSetDel(c *ipsetConn, set string, a netip.Addr) error {
	err := c.exec(tcIpsetRequest(nl.IPSET_CMD_DEL, set, a))
	if err != nil && !errors.Is(err, nl.IPSetError(nl.IPSET_ERR_EXIST)) {
		return fmt.Errorf("ipset del %s %v: %w", set, a, err)
	}
	return nil
}

// tcSetAddMark adds a with the skbinfo mark that `-j SET --map-mark`
// copies to the packet, replacing the mark and timeout of an entry a
// already has (no NLM_F_EXCL: ipset's -exist). vishvananda/netlink's
// IPSetEntry.Mark is the hash:ip,mark key, not skbinfo, so the message is
// built here, the same way the library builds its own.
func tcSetAddMark(c *ipsetConn, set string, a netip.Addr, mark, mask uint32) error {
	if err := c.exec(tcIpsetAddRequest(set, a, mark, mask)); err != nil {
		return fmt.Errorf("ipset add %s %v skbmark %#x/%#x: %w", set, a, mark, mask, err)
	}
	return nil
}

func tcIpsetAddRequest(set string, a netip.Addr, mark, mask uint32) *nl.NetlinkRequest {
	var skb [8]byte
	binary.BigEndian.PutUint32(skb[:4], mark)
	binary.BigEndian.PutUint32(skb[4:], mask)
	return tcIpsetRequest(nl.IPSET_CMD_ADD, set, a, nl.NewRtAttr(nl.IPSET_ATTR_SKBMARK|int(nl.NLA_F_NET_BYTEORDER), skb[:]))
}

// tcIpsetRequest is an ipset command on one IPv4 entry of set, with the
// entry's extensions.
func tcIpsetRequest(cmd int, set string, a netip.Addr, ext ...*nl.RtAttr) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), nl.GetIpsetFlags(cmd))
	req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(unix.AF_INET), Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(set)))
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	ip := nl.NewRtAttr(nl.IPSET_ATTR_IP|int(nl.NLA_F_NESTED), nil)
	ip.AddRtAttr(nl.IPSET_ATTR_IPADDR_IPV4|int(nl.NLA_F_NET_BYTEORDER), a.AsSlice())
	data.AddChild(ip)
	for _, e := range ext {
		data.AddChild(e)
	}
	req.AddData(data)
	return req
}

// ipsetConn sends a backend's ipset updates over one netfilter netlink
// socket, opened in the namespace of the thread that creates it (the
// backend's). The library's package-level calls, and a request without
// sockets, open, configure and close a socket per message: five system
// calls around the send and receive that do the work, for every writer
// whose delay changes on every tick. netem and HTB each keep one; a nil
// *ipsetConn does as the library does (BenchmarkNetemSetTickSocketPerMessage).
type ipsetConn struct {
	sh nl.SocketHandle
}

func newIpsetConn() (*ipsetConn, error) {
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netfilter netlink socket: %w", err)
	}
	if err := errors.Join(s.SetSendTimeout(&nl.SocketTimeoutTv), s.SetReceiveTimeout(&nl.SocketTimeoutTv)); err != nil {
		s.Close()
		return nil, fmt.Errorf("netfilter netlink socket: %w", err)
	}
	return &ipsetConn{sh: nl.SocketHandle{Socket: s}}, nil
}

func (c *ipsetConn) close() {
	if c != nil {
		c.sh.Close()
	}
}

// exec runs req, mapping ipset's private error numbers as the library
// does.
func (c *ipsetConn) exec(req *nl.NetlinkRequest) error {
	if c != nil {
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: &c.sh}
	}
	_, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if errno, ok := err.(syscall.Errno); ok && int(errno) >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(uintptr(errno))
	}
	return err
}

// lease is a backend's heartbeat in the kernel, the one mechanism that
// makes the kernel-side backends fail open: refresh runs three times per
// TTL until end, and what it refreshes (netem's and HTB's ipset entries,
// whose timeouts it resets; a BPF backend's deadline, bpfLease) lapses
// within the TTL once the agent is dead. Its goroutine runs in the
// creator's network namespace, where the sets live (a property of its OS
// thread).
type lease struct {
	stop, done chan struct{}
}

func startLease(ttl time.Duration, refresh func()) *lease {
	l := &lease{stop: make(chan struct{}), done: make(chan struct{})}
	enter := creatorNS()
	go func() {
		defer close(l.done)
		if err := enter(); err != nil {
			return
		}
		tick := time.NewTicker(max(ttl/3, 10*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
				refresh()
			}
		}
	}()
	return l
}

// end stops the refreshes (what they kept then lapses within the TTL
// unless removed first); a nil lease is fine.
func (l *lease) end() {
	if l == nil {
		return
	}
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// enterNS moves the calling (locked) thread into ns unless it is there
// already.
func enterNS(ns netns.NsHandle) error {
	cur, err := netns.Get()
	if err == nil {
		same := cur.Equal(ns)
		cur.Close()
		if same {
			return nil
		}
	}
	return netns.Set(ns)
}

// tcCleanupSets destroys label's sets; run after the rules that use them
// are gone (the kernel refuses to destroy a set in use).
func tcCleanupSets(label string) error {
	// The skbinfo sets go by name first: listing them would make the
	// library log every skbmark attribute it does not parse.
	for _, set := range []string{tcRateSet(label), tcMapSet(label, "r"), tcMapSet(label, "w")} {
		if err := ipsetCall(func() error { return netlink.IpsetDestroy(set) }); err != nil && !isNoSet(err) {
			return fmt.Errorf("destroy ipset %s: %w", set, err)
		}
	}
	return destroyOwnSets(func(name string) bool { return tcOwnSet(label, name) })
}

// CleanupTC removes every object the netem or HTB backend with this label
// created — root qdiscs (with their classes, leaves and filters), mangle
// rules and chains, ipsets — also those of a process that crashed. It is
// what New* does first and Close does last; call it at start-up or from
// an operator's "sanqos cleanup".
func CleanupTC(label string) error {
	if err := tcCheckLabel(label); err != nil {
		return err
	}
	errs := deleteOwnRoots(tcRootMajor(label), "htb")
	if err := tcCleanupNetfilter(label); err != nil {
		errs = append(errs, err)
	}
	if err := tcCleanupSets(label); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
