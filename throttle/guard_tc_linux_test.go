package throttle

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/vishvananda/netlink"
)

// classBytes is the bytes a class has sent.
func classBytes(t *testing.T, dev string, handle uint32) uint64 {
	t.Helper()
	l, err := netlink.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	cls, err := netlink.ClassList(l, netlink.HANDLE_NONE)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range cls {
		if k.Attrs().Handle == handle && k.Attrs().Statistics != nil && k.Attrs().Statistics.Basic != nil {
			return k.Attrs().Statistics.Basic.Bytes
		}
	}
	return 0
}

// passesThrough writes n bytes on w and reports whether the class
// handle of dev carried them.
func passesThrough(t *testing.T, w net.Conn, r net.Conn, dev string, handle uint32) bool {
	t.Helper()
	const n = 256 << 10
	before := classBytes(t, dev, handle)
	go func() { _, _ = w.Write(make([]byte, n)) }()
	buf := make([]byte, n)
	for got := 0; got < n; {
		k, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	return classBytes(t, dev, handle)-before >= n
}

// cappedHTB makes HTB on n's device A, caps one consumer of B at
// 64 MiB/s and connects it, and checks the consumer's traffic passes its
// class before anything is removed. It returns the backend, the
// connection's ends and the consumer's class.
func cappedHTB(t *testing.T, n *tcTestNet, cfg HTBConfig) (ht *HTB, client, server net.Conn, class uint32) {
	t.Helper()
	cfg.Device, cfg.Label, cfg.Ports = n.devA, n.label, []uint16{n.port}
	ht, err := NewHTB(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A test that fails before its Close must not leave the guard and
	// the lease running: the guard would go on repairing this test's
	// namespace, with this test's PATH (the nft test's iptables-nft
	// links) after the test removed it, logging into the tests after it.
	// Registered after the test's Setenv and TempDir, it runs before
	// them; after a Close it does nothing.
	t.Cleanup(ht.crash)
	consumer := n.addrsB[0]
	if err := ht.Set(map[netip.Addr]Setting{consumer: {Rate: 64 << 20}}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, server = n.connect(t, ln, consumer)
	class = netlink.MakeHandle(ht.marks.Major, ht.cur[consumer].minor)
	if !passesThrough(t, server, client, n.devA, class) {
		t.Fatal("the consumer's traffic does not pass its class before any removal")
	}
	return ht, client, server, class
}

// reinstalledAfter runs each removal in turn in A by name, asserts the
// backend's guard counted its reinstall within one tick, and calls check
// with the removal's command line.
func reinstalledAfter(t *testing.T, n *tcTestNet, r Reinstaller, removals [][]string, check func(cmd string, took time.Duration)) {
	t.Helper()
	for i, remove := range removals {
		cmd := strings.Join(remove, " ")
		n.inA(t, remove...)
		check(cmd, restoredWithinOneTick(t, r, uint64(i+1), cmd))
	}
}

// restoredWithinOneTick asserts what an operator is promised after a
// firewall flush: the guard's first whole check after the removal (one
// control tick) has put the objects back, so r has counted want
// reinstalls. A check already running when the removal came may have
// missed it; the one after it cannot. It returns how long that took.
func restoredWithinOneTick(t testing.TB, r Reinstaller, want uint64, what string) time.Duration {
	t.Helper()
	start := time.Now()
	g := guardOf(t, r)
	guardChecks(t, g, 2)
	if got := r.Reinstalls(); got < want {
		t.Fatalf("%s: %d reinstalls after the first whole check since (every %v), want %d: not restored within one tick", what, got, g.interval, want)
	}
	return time.Since(start)
}

// guardOf is the guard behind a backend.
func guardOf(t testing.TB, r Reinstaller) *guard {
	t.Helper()
	switch b := r.(type) {
	case *HTB:
		return b.guard
	case *WriteCap:
		return b.guard
	case *EDT:
		return b.guard
	case *Netem:
		return b.guard
	case *DelayLine:
		return b.guard
	}
	t.Fatalf("no guard known for %T", r)
	return nil
}

// passesAgainAfter is reinstalledAfter checking that the bytes written on
// w pass class of dev again.
func passesAgainAfter(t *testing.T, n *tcTestNet, r Reinstaller, removals [][]string, w, rd net.Conn, dev string, class uint32) {
	t.Helper()
	reinstalledAfter(t, n, r, removals, func(cmd string, took time.Duration) {
		t.Helper()
		t.Logf("%s: restored by the next whole check (two checks took %v)", cmd, took)
		if !passesThrough(t, w, rd, dev, class) {
			t.Errorf("after %s and the reinstall, the consumer's traffic does not pass its class", cmd)
		}
	})
}

// HTB's tree goes with `tc qdisc del dev X root`, its marking with
// `iptables -t mangle -F` or a firewall manager's iptables-restore of
// the mangle table, or only the jump into ours with `iptables -t mangle
// -F POSTROUTING`: each time the guard puts them back within one
// control tick, with the consumer's class, and the consumer's traffic
// is capped through its class again. Four removals within the minute
// are one log line and four reinstalls.
func TestHTBReinstallsRemovedTreeAndRules(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	h := &logRecords{}
	ht, client, server, class := cappedHTB(t, n, HTBConfig{tcConfig: tcConfig{Log: slog.New(h)}})
	guardChecks(t, ht.guard, 3)
	if got := ht.Reinstalls(); got != 0 {
		t.Fatalf("%d reinstalls before anything was removed", got)
	}
	passesAgainAfter(t, n, ht, [][]string{
		{"tc", "qdisc", "del", "dev", n.devA, "root"},
		{"iptables", "-t", "mangle", "-F"},
		{"iptables", "-t", "mangle", "-F", "POSTROUTING"}, // the hook's jump only
		{"sh", "-c", "printf '*mangle\\nCOMMIT\\n' | iptables-restore"},
	}, server, client, n.devA, class)
	guardChecks(t, ht.guard, 5)
	if got := ht.Reinstalls(); got != 4 {
		t.Errorf("4 removals, %d reinstalls", got)
	}
	if c := h.count(slog.LevelWarn, "reinstalled"); c != 1 {
		t.Errorf("4 removals within the minute logged %d times, want once", c)
	}
	if err := ht.Close(); err != nil {
		t.Fatal(err)
	}
	n.assertNothingLeft(t)
}

// A root qdisc someone put in place of HTB's is their configuration:
// the guard reports it once and does not replace it.
func TestHTBGuardLeavesSomeoneElsesRoot(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	h := &logRecords{}
	ht, err := NewHTB(HTBConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}, Log: slog.New(h)}})
	if err != nil {
		t.Fatal(err)
	}
	defer ht.Close()
	n.inA(t, "tc", "qdisc", "replace", "dev", n.devA, "root", "handle", "7:", "htb")
	guardChecks(t, ht.guard, 5)
	if got := n.inA(t, "tc", "qdisc", "show", "dev", n.devA, "root"); !strings.Contains(got, "htb 7:") {
		t.Errorf("someone's root qdisc replaced: %s", got)
	}
	if ht.Reinstalls() != 0 {
		t.Errorf("%d reinstalls over someone's root", ht.Reinstalls())
	}
	if c := h.count(slog.LevelError, "did not create"); c != 1 {
		t.Errorf("someone's root reported %d times, want once", c)
	}
}

// The write caps' steering goes with `tc qdisc del dev X clsact`, their
// IFB with `ip link del`: the guard rebuilds each within a few control
// ticks, with the capped consumer's class, and its writes pass through
// the class again.
func TestWriteCapReinstallsRemovedFiltersAndIFB(t *testing.T) {
	n, ln, w := writeCapNet(t)
	t.Cleanup(func() { w.Close() })
	consumer := n.addrsB[0]
	if err := w.Set(map[netip.Addr]Setting{consumer: {WriteRate: 64 << 20}}); err != nil {
		t.Fatal(err)
	}
	client, server := n.connect(t, ln, consumer)
	ifb, class := WriteCapIFB(n.label), netlink.MakeHandle(w.major, w.cur[consumer].minor)
	if !passesThrough(t, client, server, ifb, class) {
		t.Fatal("the consumer's writes do not pass its class before any removal")
	}
	guardChecks(t, w.guard, 3)
	if got := w.Reinstalls(); got != 0 {
		t.Fatalf("%d reinstalls before anything was removed", got)
	}
	passesAgainAfter(t, n, w, [][]string{
		{"tc", "qdisc", "del", "dev", n.devA, "clsact"},
		{"ip", "link", "del", ifb},
	}, client, server, ifb, class)
	guardChecks(t, w.guard, 5)
	if got := w.Reinstalls(); got != 2 {
		t.Errorf("2 removals, %d reinstalls", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	assertWriteCapGone(t, n)
	if q := clsactOf(t, n.devA); q != "" {
		t.Errorf("the clsact the guard re-added is left after Close: %s", q)
	}
}

// EDT where the kernel has fq: its fq goes with `tc qdisc del dev X
// root`, its program with `tc qdisc del dev X clsact`; the guard puts
// each back within one control tick and the delayed consumer's
// replies take its delay again. Where the kernel has no fq (this lab's
// 6.18) NewEDT refuses and leaves nothing; the stock-kernel tier
// (lab/guest) runs the rest.
func TestEDTReinstallsRemovedQdiscs(t *testing.T) {
	withKernelBackend(t, ErrNoFq, func() (bool, string) { return EDTAvailable() }, func(n *tcTestNet) (Throttle, error) {
		return NewEDT(EDTConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	}, func(t *testing.T, n *tcTestNet, th Throttle) {
		delayedAgainAfter(t, n, th, [][]string{
			{"tc", "qdisc", "del", "dev", n.devA, "root"},
			{"tc", "qdisc", "del", "dev", n.devA, "clsact"},
		})
	})
}

// netem where the kernel has it: its tree goes with `tc qdisc del dev X
// root`, its marking with `iptables -t mangle -F`; each is put back and
// the consumer's replies are delayed again. Where the kernel has none,
// NewNetem refuses and leaves nothing.
func TestNetemReinstallsRemovedTreeAndRules(t *testing.T) {
	withKernelBackend(t, ErrNoNetem, func() (bool, string) {
		ok, err := NetemAvailable()
		return ok && err == nil, fmt.Sprint(ok, err)
	}, func(n *tcTestNet) (Throttle, error) {
		return NewNetem(NetemConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}, MaxDelay: 40 * time.Millisecond})
	}, func(t *testing.T, n *tcTestNet, th Throttle) {
		delayedAgainAfter(t, n, th, [][]string{
			{"tc", "qdisc", "del", "dev", n.devA, "root"},
			{"iptables", "-t", "mangle", "-F"},
		})
	})
}

// delayedAgainAfter delays one consumer's replies by 20 ms, then runs
// each removal in turn, waits for the backend's guard to reinstall, and
// checks the consumer's round trip takes the delay again; then it closes
// the backend.
func delayedAgainAfter(t *testing.T, n *tcTestNet, th Throttle, removals [][]string) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	slow := n.addrsB[0]
	const d = 20 * time.Millisecond
	if err := th.Set(map[netip.Addr]Setting{slow: {ReadDelay: d}}); err != nil {
		t.Fatal(err)
	}
	rtt := func() time.Duration {
		c, s := n.connect(t, ln, slow)
		return pct(pingPong(t, s.(*net.TCPConn), c.(*net.TCPConn), 20), 0.5)
	}
	r := th.(Reinstaller)
	reinstalledAfter(t, n, r, removals, func(cmd string, took time.Duration) {
		t.Helper()
		got := rtt()
		t.Logf("%s: %s restored by the next whole check (two checks took %v); round trip p50 %v", th.Name(), cmd, took, got)
		if got < d {
			t.Errorf("%s: after %s and the reinstall, round trip %v, want ≥ %v", th.Name(), cmd, got, d)
		}
	})
	if got := r.Reinstalls(); got != uint64(len(removals)) {
		t.Errorf("%s: %d removals, %d reinstalls", th.Name(), len(removals), got)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
}

// netem's marking (which this lab's kernel runs without the netem
// qdisc): a flush of the mangle table or of the hook alone shows in the
// sets' reference counts, and the repair puts back the rules, after
// which a delayed consumer's segments carry their step's mark again.
func TestNetemMarkingReinstalled(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	fd, ipt := markProbe(t)
	ne, undo := markingNetem(t, NetemConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}, WriteOn: WriteOnACKs})
	defer undo()
	reader, writer := n.addrsB[0], n.addrsB[1]
	if err := ne.Set(map[netip.Addr]Setting{reader: {ReadDelay: time.Millisecond}, writer: {WriteDelay: 2 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	g := ne.tcGuard()
	cc := &checkConn{}
	defer cc.close()
	repair := func() error {
		return g.repairMarking(cc, ne.remark, ne.installRules, func(set string) error { return tcCreateSet(set, true, ne.cfg.TTL) })
	}
	m := ne.plan.Marks
	for i, remove := range [][]string{
		nil, // as built
		{"iptables", "-t", "mangle", "-F"},
		{"iptables", "-t", "mangle", "-F", "POSTROUTING"},
	} {
		if remove != nil {
			n.inA(t, remove...)
			if err := g.checkMarking(cc); !errors.Is(err, errBroken) {
				t.Fatalf("after %s: check %v, want it broken", strings.Join(remove, " "), err)
			}
			if err := repair(); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.checkMarking(cc); err != nil {
			t.Fatalf("removal %d: check after the repair: %v", i, err)
		}
		for j, p := range []struct {
			dst     netip.Addr
			payload int
			step    int
		}{{reader, 8, 2}, {writer, 0, 4}} {
			dport := uint16(41001 + 10*i + j)
			count := markCounter(t, ipt, dport, m.mark(uint32(p.step)), m.Mask)
			sendSegment(t, fd, n.addrA, p.dst, n.port, dport, p.payload)
			if got := count(); got != 1 {
				t.Errorf("removal %d: %v's segment without step %d's mark", i, p.dst, p.step)
			}
		}
	}
}

// BenchmarkGuardCheckHTB is the cost of one check of HTB's tree and
// marking (the root qdisc, one ipset header): what its guard spends every
// control tick.
func BenchmarkGuardCheckHTB(b *testing.B) {
	n := newTCTestNet(b)
	n.enterA(b)
	ht, err := NewHTB(HTBConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}, Check: -1, Log: slog.New(slog.DiscardHandler)}})
	if err != nil {
		b.Fatal(err)
	}
	defer ht.Close()
	g := ht.tcGuard()
	c := &checkConn{}
	defer c.close()
	b.ResetTimer()
	for range b.N {
		if err := g.check(c); err != nil {
			b.Fatal(err)
		}
	}
}

// With iptables-nft (Debian's default iptables), `nft flush ruleset`
// takes every table and HTB's mangle rules with them: the nft rules hold
// references on the ipsets as xtables' do, so the guard sees it the same
// way and puts the rules back, and the consumer's traffic passes its
// class again.
func TestHTBReinstallsAfterNftFlushRuleset(t *testing.T) {
	testenv.RequireCommands(t, "nft", "iptables-nft", "iptables-nft-save", "iptables-nft-restore")
	bin := t.TempDir()
	for name, target := range map[string]string{"iptables": "iptables-nft", "iptables-save": "iptables-nft-save", "iptables-restore": "iptables-nft-restore"} {
		p, err := exec.LookPath(target)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	n := newTCTestNet(t)
	n.enterA(t)
	if v := n.inA(t, "iptables", "--version"); !strings.Contains(v, "nf_tables") {
		t.Fatalf("iptables is not iptables-nft: %s", v)
	}
	ht, client, server, class := cappedHTB(t, n, HTBConfig{})
	passesAgainAfter(t, n, ht, [][]string{{"nft", "flush", "ruleset"}}, server, client, n.devA, class)
	if err := ht.Close(); err != nil {
		t.Fatal(err)
	}
	n.assertNothingLeft(t)
}
