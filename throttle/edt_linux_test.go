package throttle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// segment is the target's segment from sport to dst (IPv4 or IPv6) with
// n bytes of payload.
func segment(sport uint16, dst netip.Addr, n int) []byte {
	f := frame{ethertype: unix.ETH_P_IP, proto: unix.IPPROTO_TCP, src: netip.MustParseAddr("10.201.0.1"), dst: dst, sport: sport, dport: 40000, payload: n}
	if dst.Is6() {
		f.ethertype, f.src = unix.ETH_P_IPV6, netip.MustParseAddr("fd00:201::1")
	}
	return f.bytes()
}

// edtTestMaps are one family's maps of the EDT program, for a test.
type edtTestMaps struct{ delays, last *ebpf.Map }

func newEDTTestMaps(t *testing.T, keySize uint32) edtTestMaps {
	t.Helper()
	testenv.RequireRoot(t)
	d, l, err := edtMapPair(int(keySize), keySize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); l.Close() })
	return edtTestMaps{d, l}
}

func (m edtTestMaps) fds() edtMaps { return edtMaps{delays: m.delays.FD(), last: m.last.FD()} }

// edtTestKey is a test address's key in the maps of its family.
func edtTestKey(a netip.Addr) any {
	if k, ok := ipv4Key(a); ok {
		return k
	}
	k, _ := ipv6Key(a)
	return k
}

// edtTestProgram loads the program over the maps (v6 nil: IPv4 alone).
func edtTestProgram(t *testing.T, on WriteOn, v4 edtTestMaps, v6 *edtTestMaps, beat *ebpf.Map) *ebpf.Program {
	t.Helper()
	var m6 *edtMaps
	if v6 != nil {
		m6 = &edtMaps{delays: v6.delays.FD(), last: v6.last.FD()}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: edtProgram([]uint16{3260, 4420}, on, v4.fds(), m6, beat.FD())})
	if err != nil {
		t.Fatalf("%v: the kernel's verifier refused the program: %v", on, err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// The EDT program, run by the kernel on crafted frames
// (BPF_PROG_TEST_RUN), matching two ports (iSCSI's and NVMe/TCP's):
// the departure time it stamps, per family, kind of
// segment and write_delay_on, against the delay line's rules. Each
// family's consumer is found in its own map only, an IPv6 frame with an
// extension header passes, and the program built without the IPv6 part
// leaves IPv6 alone.
func TestEDTProgram(t *testing.T) {
	_, beat := programMaps(t, 16)
	v4, v6 := newEDTTestMaps(t, 4), newEDTTestMaps(t, 16)
	slow4, other4 := netip.MustParseAddr("10.201.0.2"), netip.MustParseAddr("10.201.0.3")
	slow6, other6 := netip.MustParseAddr("fd00:201::2"), netip.MustParseAddr("fd00:201::3")
	const read, write = 2 * time.Millisecond, 5 * time.Millisecond
	for _, k := range []struct {
		m edtTestMaps
		a netip.Addr
	}{{v4, slow4}, {v6, slow6}} {
		if err := k.m.delays.Put(edtTestKey(k.a), [2]uint64{uint64(read), uint64(write)}); err != nil {
			t.Fatal(err)
		}
	}
	// The IPv4 address whose key equals the first 4 bytes of slow6, and
	// an IPv6 one ending in slow4's bytes: neither is a consumer.
	alias4 := netip.AddrFrom4([4]byte(slow6.AsSlice()[:4]))
	alias6 := netip.AddrFrom16([16]byte{0xfd, 12: 10, 13: 201, 14: 0, 15: 2})
	hbh := frame{ethertype: unix.ETH_P_IPV6, proto: 0, src: netip.MustParseAddr("fd00:201::1"), dst: slow6, sport: 3260, dport: 40000, payload: 48}.bytes()
	for _, on := range []WriteOn{WriteOnReplies, WriteOnACKs} {
		replyDelay, ackDelay := max(read, write), time.Duration(0)
		if on == WriteOnACKs {
			replyDelay, ackDelay = read, write
		}
		progs := map[string]*ebpf.Program{"both": edtTestProgram(t, on, v4, &v6, beat), "v4 only": edtTestProgram(t, on, v4, nil, beat)}
		later := monoNow() + uint64(time.Hour)
		for _, tc := range []struct {
			name   string
			prog   string
			frame  []byte
			stamp  uint64 // the skb's tstamp on entry
			lapsed bool
			delay  time.Duration // -1: the stamp must be left as it was
		}{
			{"a segment with payload", "both", segment(3260, slow4, 48), 0, false, replyDelay},
			{"a pure ACK", "both", segment(3260, slow4, 0), 0, false, ackDelay},
			{"another source port", "both", segment(22, slow4, 48), 0, false, 0},
			{"the second of the ports (NVMe/TCP's)", "both", segment(4420, slow4, 48), 0, false, replyDelay},
			{"an unthrottled consumer", "both", segment(3260, other4, 48), 0, false, 0},
			{"a lapsed heartbeat fails open", "both", segment(3260, slow4, 48), 0, true, 0},
			{"the sender's later stamp is kept", "both", segment(3260, slow4, 48), later, false, -1},
			{"IPv6: a segment with payload", "both", segment(3260, slow6, 48), 0, false, replyDelay},
			{"IPv6: a pure ACK", "both", segment(3260, slow6, 0), 0, false, ackDelay},
			{"IPv6: another source port", "both", segment(22, slow6, 48), 0, false, 0},
			{"IPv6: the second of the ports", "both", segment(4420, slow6, 48), 0, false, replyDelay},
			{"IPv6: an unthrottled consumer", "both", segment(3260, other6, 48), 0, false, 0},
			{"IPv6: a lapsed heartbeat fails open", "both", segment(3260, slow6, 48), 0, true, 0},
			{"IPv6: the sender's later stamp is kept", "both", segment(3260, slow6, 48), later, false, -1},
			{"IPv6: an extension header passes", "both", hbh, 0, false, 0},
			{"IPv4 whose key is IPv6's first bytes", "both", segment(3260, alias4, 48), 0, false, 0},
			{"IPv6 ending in an IPv4 consumer's bytes", "both", segment(3260, alias6, 48), 0, false, 0},
			{"IPv4 on the IPv4-only program", "v4 only", segment(3260, slow4, 48), 0, false, replyDelay},
			{"IPv6 on the IPv4-only program passes", "v4 only", segment(3260, slow6, 48), 0, false, 0},
		} {
			deadline := monoNow() + uint64(time.Minute)
			if tc.lapsed {
				deadline = monoNow() - 1
			}
			if err := beat.Put(uint32(0), deadline); err != nil {
				t.Fatal(err)
			}
			// Each case on its own: no departure left by the one before.
			_ = v4.last.Delete(edtTestKey(slow4))
			_ = v6.last.Delete(edtTestKey(slow6))
			in := make([]byte, skbTstampOff+8)
			binary.NativeEndian.PutUint64(in[skbTstampOff:], tc.stamp)
			out := make([]byte, 256)
			before := monoNow()
			ret, err := progs[tc.prog].Run(&ebpf.RunOptions{Data: tc.frame, Context: in, ContextOut: out})
			after := monoNow()
			if err != nil {
				t.Fatalf("%v, %s: %v", on, tc.name, err)
			}
			got := binary.NativeEndian.Uint64(out[skbTstampOff:])
			switch {
			case ret != 0:
				t.Errorf("%v, %s: returned %d, want TC_ACT_OK", on, tc.name, ret)
			case tc.delay == -1 && got != tc.stamp, tc.delay == 0 && got != tc.stamp:
				t.Errorf("%v, %s: stamp %d, want it left at %d", on, tc.name, got, tc.stamp)
			case tc.delay > 0 && (got < before+uint64(tc.delay) || got > after+uint64(tc.delay)):
				t.Errorf("%v, %s: stamp now+%v, want now+%v", on, tc.name, time.Duration(got-before), tc.delay)
			}
		}
	}
}

// stampOf runs the program on a frame carrying no stamp of its own and
// returns the departure it set (0: none).
func stampOf(t *testing.T, prog *ebpf.Program, frame []byte) uint64 {
	t.Helper()
	in, out := make([]byte, skbTstampOff+8), make([]byte, 256)
	if _, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: in, ContextOut: out}); err != nil {
		t.Fatal(err)
	}
	return binary.NativeEndian.Uint64(out[skbTstampOff:])
}

// A consumer's segments with payload never depart before its earlier
// ones: not when its delay steps down, not when it is cleared while
// something of its is still held, and once that has left they pass
// unstamped again. Pure ACKs are not held back. IPv4 and IPv6 alike.
func TestEDTProgramKeepsDepartureOrder(t *testing.T) {
	_, beat := programMaps(t, 16)
	v4, v6 := newEDTTestMaps(t, 4), newEDTTestMaps(t, 16)
	prog := edtTestProgram(t, WriteOnReplies, v4, &v6, beat)
	if err := beat.Put(uint32(0), monoNow()+uint64(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		m    edtTestMaps
		slow netip.Addr
	}{{v4, netip.MustParseAddr("10.201.0.2")}, {v6, netip.MustParseAddr("fd00:201::2")}} {
		key := edtTestKey(f.slow)
		setDelay := func(d time.Duration) {
			t.Helper()
			if d == 0 {
				if err := f.m.delays.Delete(key); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err := f.m.delays.Put(key, [2]uint64{uint64(d), 0}); err != nil {
				t.Fatal(err)
			}
		}
		const long, short = 400 * time.Millisecond, 5 * time.Millisecond
		setDelay(long)
		first := stampOf(t, prog, segment(3260, f.slow, 48))
		if first < monoNow()+uint64(long-50*time.Millisecond) {
			t.Fatalf("%v: first segment stamped %v ahead, want about %v", f.slow, time.Duration(first-monoNow()), long)
		}
		setDelay(short)
		if got := stampOf(t, prog, segment(3260, f.slow, 48)); got < first {
			t.Errorf("%v: after a step down: stamped %v before the segment ahead of it", f.slow, time.Duration(first-got))
		}
		setDelay(0)
		if got := stampOf(t, prog, segment(3260, f.slow, 48)); got < first {
			t.Errorf("%v: cleared with a segment still held: stamped %d, %v before the one ahead of it", f.slow, got, time.Duration(first-got))
		}
		if got := stampOf(t, prog, segment(3260, f.slow, 0)); got != 0 {
			t.Errorf("%v: a pure ACK of a cleared consumer stamped %v ahead", f.slow, time.Duration(got-monoNow()))
		}
		// Once the last departure has passed, nothing is held back.
		if err := f.m.last.Put(key, monoNow()-1); err != nil {
			t.Fatal(err)
		}
		if got := stampOf(t, prog, segment(3260, f.slow, 48)); got != 0 {
			t.Errorf("%v: nothing held and no delay: stamped %v ahead", f.slow, time.Duration(got-monoNow()))
		}
	}
}

// End to end on a veth: where the kernel has sch_fq, a delayed consumer's
// replies take the delay and its neighbour's do not, and Close gives the
// device its default qdisc back with nothing of ours left. Where it has
// none (this lab's 6.18), NewEDT refuses with ErrNoFq and leaves nothing:
// the stock-kernel tier (lab/guest) runs the first half. It and netem's
// below match two ports (iSCSI's, where the test's traffic flows, and
// NVMe/TCP's), as the config's default ports have them.
func TestEDTDelaysOrRefusesCleanly(t *testing.T) {
	delaysOrRefuses(t, ErrNoFq, func() (bool, string) { return EDTAvailable() }, func(n *tcTestNet) (Throttle, error) {
		return NewEDT(EDTConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port, 4420}}})
	})
}

// A consumer's delay falling (a step down, or cleared) must not let its
// newer segments overtake the older ones still held: out of order at the
// receiver, they draw duplicate ACKs and spurious retransmissions from
// the target. The target streams to the consumer while its read delay
// goes 20 ms → 5 ms → none, ten times over.
func TestEDTKeepsOrderAsDelaysFall(t *testing.T) {
	withKernelBackend(t, ErrNoFq, func() (bool, string) { return EDTAvailable() }, func(n *tcTestNet) (Throttle, error) {
		return NewEDT(EDTConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	}, keepsOrderAsDelaysFall)
}

func keepsOrderAsDelaysFall(t *testing.T, n *tcTestNet, th Throttle) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	consumer := n.addrsB[0]
	c, s := n.connect(t, ln, consumer)
	client, target := c.(*net.TCPConn), s.(*net.TCPConn)
	// The target writes 64 KiB every 5 ms (12.5 MiB/s): segments are
	// always in flight when a delay changes.
	go func() {
		buf := make([]byte, 64<<10)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if _, err := target.Write(buf); err != nil {
				return
			}
		}
	}()
	m := newMeter([]net.Conn{client})
	info := func(c *net.TCPConn) *unix.TCPInfo {
		rc, _ := c.SyscallConn()
		var i *unix.TCPInfo
		var err error
		rc.Control(func(fd uintptr) { i, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	ooo0, re0 := info(client).Rcv_ooopack, info(target).Total_retrans
	for range 10 {
		for _, d := range []time.Duration{20 * time.Millisecond, 5 * time.Millisecond, 0} {
			if err := th.Set(map[netip.Addr]Setting{consumer: {ReadDelay: d}}); err != nil {
				t.Fatal(err)
			}
			<-time.After(150 * time.Millisecond)
		}
	}
	r := m.rates(0, 200*time.Millisecond)
	ooo, re := info(client).Rcv_ooopack-ooo0, info(target).Total_retrans-re0
	t.Logf("%s: 30 delay changes at %.0f B/s: %d segments received out of order, %d retransmitted", th.Name(), r[0], ooo, re)
	if r[0] < 6<<20 {
		t.Errorf("the stream ran at %.0f B/s: too slow to have segments in flight at each change", r[0])
	}
	if ooo > 0 || re > 0 {
		t.Errorf("%s reordered a consumer's segments as its delay fell: %d received out of order, %d retransmitted", th.Name(), ooo, re)
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
}

// The thesis' tree end to end, likewise: where the kernel has netem, a
// delayed consumer's replies take the delay through its step's netem leaf
// and its neighbour's do not; where it has none, NewNetem refuses and
// leaves nothing.
func TestNetemDelaysOrRefusesCleanly(t *testing.T) {
	delaysOrRefuses(t, ErrNoNetem, func() (bool, string) {
		ok, err := NetemAvailable()
		return ok && err == nil, fmt.Sprint(ok, err)
	}, func(n *tcTestNet) (Throttle, error) {
		return NewNetem(NetemConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port, 4420}}, MaxDelay: 40 * time.Millisecond})
	})
}

// delaysOrRefuses runs a kernel delay backend's end-to-end test where the
// kernel has what it needs (available), and otherwise checks that its
// constructor refuses with refusal and leaves the device as it was.
func delaysOrRefuses(t *testing.T, refusal error, available func() (bool, string), build func(*tcTestNet) (Throttle, error)) {
	withKernelBackend(t, refusal, available, build, delaysOneConsumer)
}

// withKernelBackend builds a kernel delay backend on A's device and runs
// test with it where the kernel has what it needs (available); otherwise
// it checks that the constructor refuses with refusal and leaves the
// device as it was. test closes the backend; nothing may be left after,
// not even the clsact a BPF backend added.
func withKernelBackend(t *testing.T, refusal error, available func() (bool, string), build func(*tcTestNet) (Throttle, error), test func(*testing.T, *tcTestNet, Throttle)) {
	n := newTCTestNet(t)
	n.enterA(t)
	l, err := netlink.LinkByName(n.devA)
	if err != nil {
		t.Fatal(err)
	}
	rootBefore, clsactBefore := rootKind(t, l), clsactOf(t, n.devA)
	th, err := build(n)
	if ok, why := available(); !ok {
		t.Logf("not available: %s", why)
		if !errors.Is(err, refusal) {
			t.Fatalf("the constructor returned %v, want %v", err, refusal)
		}
		assertDelayBackendGone(t, l, rootBefore)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	test(t, n, th)
	assertDelayBackendGone(t, l, rootBefore)
	if got := clsactOf(t, n.devA); got != clsactBefore {
		t.Errorf("qdisc in clsact's place %q after Close, was %q", got, clsactBefore)
	}
	n.assertNothingLeft(t)
}

// delaysOneConsumer gives one of B's addresses a 20 ms read delay and
// checks the round trips of both (the reply is a segment with payload),
// then closes the backend.
func delaysOneConsumer(t *testing.T, n *tcTestNet, th Throttle) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	slow, free := n.addrsB[0], n.addrsB[1]
	const d = 20 * time.Millisecond
	if err := th.Set(map[netip.Addr]Setting{slow: {ReadDelay: d}}); err != nil {
		t.Fatal(err)
	}
	p50 := map[netip.Addr]time.Duration{}
	for _, src := range []netip.Addr{slow, free} {
		c, s := n.connect(t, ln, src)
		p50[src] = pct(pingPong(t, s.(*net.TCPConn), c.(*net.TCPConn), 30), 0.5)
	}
	t.Logf("%s: round trip p50: delayed %v, neighbour %v", th.Name(), p50[slow], p50[free])
	if p50[slow] < d || p50[slow] > d+5*time.Millisecond {
		t.Errorf("delayed consumer's round trip %v, want %v plus a little", p50[slow], d)
	}
	if p50[free] > 5*time.Millisecond {
		t.Errorf("neighbour's round trip %v: it is being delayed", p50[free])
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
}

func rootKind(t *testing.T, l netlink.Link) string {
	t.Helper()
	qs, err := netlink.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q.Type()
		}
	}
	return ""
}

func assertDelayBackendGone(t *testing.T, l netlink.Link, root string) {
	t.Helper()
	if got := rootKind(t, l); got != root {
		t.Errorf("root qdisc %q, was %q", got, root)
	}
	if fs, _ := netlink.FilterList(l, netlink.HANDLE_MIN_EGRESS); len(fs) != 0 {
		t.Errorf("egress filters left: %v", fs)
	}
}
