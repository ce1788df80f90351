package throttle

import (
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// skbCtx is struct __sk_buff up to priority (offset 32): the input
// context BPF_PROG_TEST_RUN takes for a tc program.
type skbCtx struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority uint32
}

// frame is an Ethernet + IPv4 + TCP (or other proto) frame, for the
// BPF programs' tests.
type frame struct {
	ethertype    uint16
	proto        uint8
	ihl          int // IPv4 header words (default 5)
	src, dst     netip.Addr
	sport, dport uint16
	payload      int
	doff         int   // TCP header words (default 5)
	flags        uint8 // TCP flags (default ACK)
}

func (f frame) bytes() []byte {
	if f.ethertype == unix.ETH_P_IPV6 {
		return f.bytes6()
	}
	ihl, doff := max(f.ihl, 5), max(f.doff, 5)
	b := make([]byte, 14+ihl*4+doff*4+f.payload)
	binary.BigEndian.PutUint16(b[12:], f.ethertype)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x40|byte(ihl), 64, f.proto
	binary.BigEndian.PutUint16(ip[2:], uint16(ihl*4+doff*4+f.payload))
	src, dst := f.src.As4(), f.dst.As4()
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	tcp := ip[ihl*4:]
	binary.BigEndian.PutUint16(tcp[0:], f.sport)
	binary.BigEndian.PutUint16(tcp[2:], f.dport)
	tcp[12] = byte(doff) << 4
	tcp[13] = 0x10 // ACK
	if f.flags != 0 {
		tcp[13] = f.flags
	}
	return b
}

// bytes6 is the frame over IPv6: a 40-byte header with proto as its
// next header (no extension headers).
func (f frame) bytes6() []byte {
	doff := max(f.doff, 5)
	b := make([]byte, 14+40+doff*4+f.payload)
	binary.BigEndian.PutUint16(b[12:], f.ethertype)
	ip := b[14:]
	ip[0], ip[6], ip[7] = 0x60, f.proto, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(doff*4+f.payload))
	src, dst := f.src.As16(), f.dst.As16()
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	tcp := ip[40:]
	binary.BigEndian.PutUint16(tcp[0:], f.sport)
	binary.BigEndian.PutUint16(tcp[2:], f.dport)
	tcp[12] = byte(doff) << 4
	tcp[13] = 0x10 // ACK
	if f.flags != 0 {
		tcp[13] = f.flags
	}
	return b
}

// key4 is an IPv4 test address's key in the BPF maps.
func key4(a netip.Addr) uint32 {
	k, ok := ipv4Key(a)
	if !ok {
		panic(fmt.Sprintf("key4(%v): not IPv4", a))
	}
	return k
}

// programMaps makes a BPF program's maps for a test: consumers (IPv4 key,
// valueSize bytes) and the one-entry lease. Needs root.
func programMaps(t *testing.T, valueSize uint32) (consumers, lease *ebpf.Map) {
	t.Helper()
	testenv.RequireRoot(t)
	var err error
	if consumers, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: valueSize, MaxEntries: 16}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { consumers.Close() })
	if lease, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close() })
	return consumers, lease
}

// toTarget is a consumer's segment to the target's port, with 1,000
// bytes of payload.
func toTarget(ethertype uint16, proto uint8, ihl int, src netip.Addr, dport uint16) []byte {
	return frame{ethertype: ethertype, proto: proto, ihl: ihl, src: src, dst: netip.MustParseAddr("10.201.0.1"), sport: 40000, dport: dport, payload: 1000}.bytes()
}

// toTargetTCP is a consumer's TCP segment to the target's port 3260.
func toTargetTCP(src netip.Addr, doff int, flags uint8, payload int) []byte {
	return frame{ethertype: unix.ETH_P_IP, proto: unix.IPPROTO_TCP, src: src, dst: netip.MustParseAddr("10.201.0.1"), sport: 40000, dport: 3260, doff: doff, flags: flags, payload: payload}.bytes()
}

// The steering program, run by the kernel on crafted frames
// (BPF_PROG_TEST_RUN): it hands on to the redirect, tagged with the
// consumer's class,
// exactly the TCP segments to the target port from a capped consumer, and
// nothing once the heartbeat has lapsed; a lifted cap's consumer until
// its path has been found empty up to its last segment.
func TestWriteCapProgram(t *testing.T) {
	consumers, beat := programMaps(t, wcapValueSize)
	drained, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer drained.Close()
	capped, other := netip.MustParseAddr("10.201.0.2"), netip.MustParseAddr("10.201.0.3")
	lifted, handed, moved := netip.MustParseAddr("10.201.0.4"), netip.MustParseAddr("10.201.0.5"), netip.MustParseAddr("10.201.0.6")
	const class, stamp = 0x51ab0010, 1000
	if err := consumers.Put(key4(capped), wcapValue{Class: class}); err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: writeCapProgram([]uint16{3260, 4420}, consumers.FD(), drained.FD(), beat.FD())})
	if err != nil {
		t.Fatalf("the kernel's verifier refused the program: %v", err)
	}
	defer prog.Close()
	// run runs the program on frame with the heartbeat fresh or lapsed.
	run := func(name string, frame []byte, lapsed bool) (ret, prio uint32) {
		t.Helper()
		deadline := monoNow() + uint64(time.Minute)
		if lapsed {
			deadline = monoNow() - 1
		}
		if err := beat.Put(uint32(0), deadline); err != nil {
			t.Fatal(err)
		}
		// The kernel copies its whole __sk_buff back (192 bytes on 6.x):
		// give it room, and read priority where the struct has it.
		out := make([]byte, 256)
		ret, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: skbCtx{}, ContextOut: out})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return ret, binary.NativeEndian.Uint32(out[32:])
	}
	const redirect = 0xffffffff // TC_ACT_UNSPEC: on to the redirect filter
	for _, tc := range []struct {
		name    string
		frame   []byte
		lapsed  bool
		ret     uint32
		classid uint32
	}{
		{"a capped consumer's segment to the target port", toTarget(unix.ETH_P_IP, unix.IPPROTO_TCP, 5, capped, 3260), false, redirect, class},
		{"IP options move the port", toTarget(unix.ETH_P_IP, unix.IPPROTO_TCP, 7, capped, 3260), false, redirect, class},
		{"TCP options move the payload", toTargetTCP(capped, 8, 0x18, 1), false, redirect, class},
		{"a pure ACK passes", toTargetTCP(capped, 5, 0x10, 0), false, 0, 0},
		{"a pure ACK with timestamps passes", toTargetTCP(capped, 8, 0x10, 0), false, 0, 0},
		{"a FIN stays in order", toTargetTCP(capped, 5, 0x11, 0), false, redirect, class},
		{"the second of the ports (NVMe/TCP's)", toTarget(unix.ETH_P_IP, unix.IPPROTO_TCP, 5, capped, 4420), false, redirect, class},
		{"another port", toTarget(unix.ETH_P_IP, unix.IPPROTO_TCP, 5, capped, 22), false, 0, 0},
		{"an uncapped consumer", toTarget(unix.ETH_P_IP, unix.IPPROTO_TCP, 5, other, 3260), false, 0, 0},
		{"UDP", toTarget(unix.ETH_P_IP, unix.IPPROTO_UDP, 5, capped, 3260), false, 0, 0},
		{"not IPv4", toTarget(unix.ETH_P_IPV6, unix.IPPROTO_TCP, 5, capped, 3260), false, 0, 0},
		{"a lapsed heartbeat fails open", toTarget(unix.ETH_P_IP, unix.IPPROTO_TCP, 5, capped, 3260), true, 0, 0},
	} {
		if ret, prio := run(tc.name, tc.frame, tc.lapsed); ret != tc.ret || prio != tc.classid {
			t.Errorf("%s: returned %d with priority %#x, want %d and %#x", tc.name, ret, prio, tc.ret, tc.classid)
		}
	}
	// A lifted cap's consumer (entry stamped 1000) is steered, its entry
	// stamped with the segment's time, until user space has said its path
	// was empty up to its stamp.
	for _, tc := range []struct {
		name    string
		a       netip.Addr
		drained uint64 // 0: no word from user space yet
		steered bool
	}{
		{"a lifted cap's consumer stays in its class until its path is found empty", lifted, 0, true},
		{"a lifted cap's consumer whose path was found empty up to its last segment takes the direct path", handed, stamp, false},
		{"a lifted cap's consumer with a segment steered since its path was found empty stays", moved, stamp - 1, true},
	} {
		if err := consumers.Put(key4(tc.a), wcapValue{Class: class, HandOver: 1, Last: stamp}); err != nil {
			t.Fatal(err)
		}
		if tc.drained != 0 {
			if err := drained.Put(key4(tc.a), tc.drained); err != nil {
				t.Fatal(err)
			}
		}
		ret, prio := run(tc.name, toTarget(unix.ETH_P_IP, unix.IPPROTO_TCP, 5, tc.a, 3260), false)
		var v wcapValue
		if err := consumers.Lookup(key4(tc.a), &v); err != nil {
			t.Fatal(err)
		}
		if steered := ret == redirect && prio == class; steered != tc.steered || (v.Last != stamp) != tc.steered {
			t.Errorf("%s: returned %d with priority %#x, entry stamped %d; want steered and stamped: %v", tc.name, ret, prio, v.Last, tc.steered)
		}
	}
}

// writeCapNet makes the two namespaces, a listener on A's port and a
// write-cap backend on A's device; the listener closes with the test,
// the backend is the caller's.
func writeCapNet(t *testing.T) (*tcTestNet, net.Listener, *WriteCap) {
	t.Helper()
	n := newTCTestNet(t)
	n.enterA(t)
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	w, err := NewWriteCap(WriteCapConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	if err != nil {
		t.Fatal(err)
	}
	return n, ln, w
}

// A write cap on a veth: one consumer capped while its neighbour sends
// freely, a change of cap at run time, no packet dropped, nothing left
// after Close.
func TestWriteCapInNamespaces(t *testing.T) {
	n, ln, w := writeCapNet(t)
	closed := false
	t.Cleanup(func() {
		if !closed {
			w.Close()
		}
	})
	capped, free := n.addrsB[0], n.addrsB[1]
	const cap1, cap2 = 2 << 20, 4 << 20
	if err := w.Set(map[netip.Addr]Setting{capped: {WriteRate: cap1}}); err != nil {
		t.Fatal(err)
	}
	// The consumers write as fast as TCP lets them; the "target" reads.
	var received []net.Conn
	for _, src := range []netip.Addr{capped, free} {
		c, s := n.connect(t, ln, src)
		received = append(received, s)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	m := newMeter(received)
	check := func(limit float64) {
		t.Helper()
		r := m.rates(time.Second, 2*time.Second)
		e := math.Abs(r[0]-limit) / limit
		t.Logf("write cap %.0f B/s: capped consumer %.0f B/s (%.1f%% off), uncapped neighbour %.0f B/s", limit, r[0], 100*e, r[1])
		// HTB counts whole frames; the payload is lower by the headers'
		// share (~4.5 % for full segments).
		if e > rateTol(0.08) {
			t.Errorf("capped consumer writes %.0f B/s, %.1f%% off its cap %.0f", r[0], 100*e, limit)
		}
		if r[1] < neighbourFactor()*limit {
			t.Errorf("uncapped neighbour only %.0f B/s: it is being shaped", r[1])
		}
	}
	check(cap1)
	if err := w.Set(map[netip.Addr]Setting{capped: {WriteRate: cap2}}); err != nil {
		t.Fatal(err)
	}
	check(cap2)
	if got := w.List(); got[capped].WriteRate != cap2 || len(got) != 1 {
		t.Errorf("List = %v", got)
	}
	if qs, err := netlink.QdiscList(w.ifb); err == nil {
		for _, q := range qs {
			if s := q.Attrs().Statistics; s != nil && s.Queue != nil && s.Queue.Drops > 0 {
				t.Errorf("%s on the IFB dropped %d packets", q.Type(), s.Queue.Drops)
			}
		}
	}
	// A dead agent's caps lapse: with the heartbeat past (as when nothing
	// refreshes it), the program steers nothing.
	w.lease.end()
	if err := w.lease.m.Put(uint32(0), monoNow()-1); err != nil {
		t.Fatal(err)
	}
	r := m.rates(500*time.Millisecond, time.Second)
	t.Logf("heartbeat lapsed: formerly capped consumer %.0f B/s", r[0])
	if r[0] < 3*cap2 {
		t.Errorf("a lapsed heartbeat left the consumer capped at %.0f B/s", r[0])
	}
	closed = true
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	assertWriteCapGone(t, n)
}

func hasClass(t *testing.T, dev netlink.Link, handle uint32) bool {
	found, _ := classQueue(t, dev, handle)
	return found
}

// classBacklog is a class's queued bytes.
func classBacklog(t *testing.T, dev netlink.Link, handle uint32) uint32 {
	_, backlog := classQueue(t, dev, handle)
	return backlog
}

// classQueue says whether dev has the class and what it queues (bytes).
func classQueue(t *testing.T, dev netlink.Link, handle uint32) (found bool, backlog uint32) {
	t.Helper()
	cls, err := netlink.ClassList(dev, netlink.HANDLE_NONE)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range cls {
		if k.Attrs().Handle != handle {
			continue
		}
		if s := k.Attrs().Statistics; s != nil && s.Queue != nil {
			return true, s.Queue.Backlog
		}
		return true, 0
	}
	return false, 0
}

func assertWriteCapGone(t *testing.T, n *tcTestNet) {
	t.Helper()
	if _, err := netlink.LinkByName(WriteCapIFB(n.label)); err == nil {
		t.Errorf("IFB %s left", WriteCapIFB(n.label))
	}
	l, err := netlink.LinkByName(n.devA)
	if err != nil {
		t.Fatal(err)
	}
	if fs, _ := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS); len(fs) != 0 {
		t.Errorf("ingress filters left: %v", fs)
	}
}

// A crashed instance's IFB and filter are removed by the next start with
// its label, and by CleanupWriteCap.
func TestWriteCapCleanupAfterCrash(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	w, err := NewWriteCap(WriteCapConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Set(map[netip.Addr]Setting{n.addrsB[0]: {WriteRate: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	w.lease.end() // the process dies: no Close
	w.guard.end()
	w2, err := NewWriteCap(WriteCapConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	if err != nil {
		t.Fatalf("restart over stale objects: %v", err)
	}
	if len(w2.List()) != 0 {
		t.Error("new instance inherited consumers")
	}
	if err := w2.Set(map[netip.Addr]Setting{n.addrsB[1]: {WriteRate: 1 << 20}, n.addrsB[0]: {ReadDelay: time.Millisecond}}); err == nil || len(w2.List()) != 0 {
		t.Errorf("a batch with a delay must be refused whole: %v, %v", err, w2.List())
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	w.close()
	assertWriteCapGone(t, n)
}

// A consumer capped again while its last cap is being handed over gets
// its class back, steered as capped: its queued segments stay ahead of
// its new ones.
func TestWriteCapRecapWhileHandingOver(t *testing.T) {
	n, _, w := writeCapNet(t)
	t.Cleanup(func() { w.Close() })
	a := n.addrsB[0]
	if err := w.Set(map[netip.Addr]Setting{a: {WriteRate: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	minor := w.cur[a].minor
	w.drain.end() // the hand-over stays where Clear leaves it
	if err := Clear(w, a); err != nil {
		t.Fatal(err)
	}
	var v wcapValue
	if err := w.consumers.Lookup(key4(a), &v); err != nil || v.HandOver == 0 || len(w.draining) != 1 {
		t.Fatalf("after Clear: map %+v (%v), draining %v; want the entry marked handed over", v, err, w.draining)
	}
	if err := w.Set(map[netip.Addr]Setting{a: {WriteRate: 2 << 20}}); err != nil {
		t.Fatal(err)
	}
	if err := w.consumers.Lookup(key4(a), &v); err != nil {
		t.Fatal(err)
	}
	if got := w.cur[a]; got.minor != minor || got.rate != 2<<20 || v.HandOver != 0 || v.Class != uint32(netlink.MakeHandle(w.major, minor)) || len(w.draining) != 0 {
		t.Errorf("capped again: %+v, map %+v, draining %v; want minor %d at 2 MiB/s, steered as capped", got, v, w.draining, minor)
	}
}
