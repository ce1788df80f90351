package throttle

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// tcTestNet is a throwaway pair of network namespaces joined by a veth:
// A plays the target (the backend runs there, shaping devA's egress), B
// the consumers, with two addresses.
type tcTestNet struct {
	nameA, nameB string
	nsA, nsB     netns.NsHandle
	devA, devB   string
	addrA        netip.Addr
	addrsB       []netip.Addr
	// IPv6 addresses, once addIPv6 has given them.
	addrA6  netip.Addr
	addrsB6 []netip.Addr
	label   string
	port    uint16
}

// inNS runs f on a thread inside ns (or a fresh thread, for netns.None(),
// that f may move elsewhere). The thread is never handed back to
// the scheduler (it dies with the goroutine), so no other goroutine can
// inherit the namespace by accident.
func inNS(ns netns.NsHandle, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if ns.IsOpen() {
			if err := netns.Set(ns); err != nil {
				ch <- err
				return
			}
		}
		ch <- f()
	}()
	return <-ch
}

func newTCTestNet(t testing.TB) *tcTestNet {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "iptables", "iptables-save")
	id := os.Getpid() % 100000
	n := &tcTestNet{
		nameA: fmt.Sprintf("sqt-%d-a", id), nameB: fmt.Sprintf("sqt-%d-b", id),
		devA:   fmt.Sprintf("sqt%da", id),
		addrA:  netip.MustParseAddr("10.201.0.1"),
		addrsB: []netip.Addr{netip.MustParseAddr("10.201.0.2"), netip.MustParseAddr("10.201.0.3")},
		label:  fmt.Sprintf("sqt%d", id),
		port:   3260,
	}
	for _, p := range []struct {
		name string
		h    *netns.NsHandle
	}{{n.nameA, &n.nsA}, {n.nameB, &n.nsB}} {
		err := inNS(netns.None(), func() error {
			h, err := netns.NewNamed(p.name)
			*p.h = h
			return err
		})
		if err != nil {
			t.Fatalf("netns %s: %v", p.name, err)
		}
		t.Cleanup(func() {
			p.h.Close()
			if err := netns.DeleteNamed(p.name); err != nil {
				t.Errorf("delete netns %s: %v", p.name, err)
			}
		})
	}
	devB := fmt.Sprintf("sqt%db", id)
	n.devB = devB
	err := inNS(n.nsA, func() error {
		la := netlink.NewLinkAttrs()
		la.Name = n.devA
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: devB, PeerNamespace: netlink.NsFd(n.nsB)}); err != nil {
			return err
		}
		return setupLink(n.devA, n.addrA)
	})
	if err != nil {
		t.Fatalf("veth in %s: %v", n.nameA, err)
	}
	if err := inNS(n.nsB, func() error { return setupLink(devB, n.addrsB...) }); err != nil {
		t.Fatalf("veth in %s: %v", n.nameB, err)
	}
	return n
}

func setupLink(dev string, addrs ...netip.Addr) error {
	for _, name := range []string{"lo", dev} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	l, _ := netlink.LinkByName(dev)
	for _, a := range addrs {
		addr, _ := netlink.ParseAddr(a.String() + "/24")
		// No DAD delay or route probing matters for IPv4; the address is
		// usable once the call returns.
		if err := netlink.AddrAdd(l, addr); err != nil {
			return err
		}
	}
	return nil
}

// addIPv6 gives A and B IPv6 addresses beside their IPv4 ones, usable at
// once (no duplicate address detection): A fd00:201::1, B ::2 and ::3.
func (n *tcTestNet) addIPv6(t testing.TB) {
	t.Helper()
	n.addrA6 = netip.MustParseAddr("fd00:201::1")
	n.addrsB6 = []netip.Addr{netip.MustParseAddr("fd00:201::2"), netip.MustParseAddr("fd00:201::3")}
	add := func(dev string, addrs ...netip.Addr) error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			addr := &netlink.Addr{IPNet: netlink.NewIPNet(a.AsSlice()), Flags: unix.IFA_F_NODAD}
			addr.IPNet.Mask = net.CIDRMask(64, 128)
			if err := netlink.AddrAdd(l, addr); err != nil {
				return fmt.Errorf("%v on %s: %w", a, dev, err)
			}
		}
		return nil
	}
	if err := inNS(n.nsA, func() error { return add(n.devA, n.addrA6) }); err != nil {
		t.Fatal(err)
	}
	if err := inNS(n.nsB, func() error { return add(n.devB, n.addrsB6...) }); err != nil {
		t.Fatal(err)
	}
}

// enterA moves the test goroutine (locked to its thread) into namespace A
// until the test ends: backends run on the caller's thread, as the agent
// runs in the namespace it was started in.
func (n *tcTestNet) enterA(t testing.TB) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	if err := netns.Set(n.nsA); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Leave the thread locked (Go then discards it) if it cannot be
		// brought back.
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		orig.Close()
	})
}

// dialFromB connects from local address src in B to A's port, at A's
// address of src's family.
func (n *tcTestNet) dialFromB(src netip.Addr) (net.Conn, error) {
	var c net.Conn
	err := inNS(n.nsB, func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
		target := n.addrA
		if src.Is6() {
			target = n.addrA6
		}
		c, err = d.Dial("tcp", netip.AddrPortFrom(target, n.port).String())
		return err
	})
	return c, err
}

// connect dials ln from local address src in B and accepts the
// connection in A; both ends close when the test ends.
func (n *tcTestNet) connect(t testing.TB, ln net.Listener, src netip.Addr) (client, server net.Conn) {
	t.Helper()
	c, err := n.dialFromB(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

// assertNothingLeft checks namespace A (the current thread's) for any
// qdisc, class, filter, rule or set of the backend.
func (n *tcTestNet) assertNothingLeft(t *testing.T) {
	t.Helper()
	l, err := netlink.LinkByName(n.devA)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if maj := q.Attrs().Handle >> 24; maj == 0x51 || maj == 0x52 || q.Type() == "htb" || q.Type() == "netem" {
			t.Errorf("qdisc left: %s %s", q.Type(), tcHandleString(q.Attrs().Handle))
		}
	}
	if cs, err := netlink.ClassList(l, 0); err != nil || len(cs) != 0 {
		t.Errorf("classes left: %v %v", cs, err)
	}
	if fs, err := netlink.FilterList(l, netlink.HANDLE_ROOT); err != nil || len(fs) != 0 {
		t.Errorf("filters left: %v %v", fs, err)
	}
	out, err := exec.Command("iptables-save", "-t", "mangle").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v %s", err, out)
	}
	if s := string(out); strings.Contains(s, n.label) || strings.Contains(s, "-j MARK") || strings.Contains(s, "--map-set") {
		t.Errorf("rules left:\n%s", s)
	}
	var sets []netlink.IPSetResult
	if err := ipsetCall(func() (err error) { sets, err = netlink.IpsetListAll(); return err }); err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		t.Errorf("ipset left: %s", s.SetName)
	}
}

// inA runs a command in namespace A by name (ip netns exec), as an
// operator would: never in the namespace the test started in.
func (n *tcTestNet) inA(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.nameA}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
