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
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// segment is the target's segment from sport to dst with n bytes of
// payload.
func segment(sport uint16, dst netip.Addr, n int) []byte {
	return frame{ethertype: unix.ETH_P_IP, proto: unix.IPPROTO_TCP, src: netip.MustParseAddr("10.201.0.1"), dst: dst, sport: sport, dport: 40000, payload: n}.bytes()
}

// The EDT program, run by the kernel on crafted frames
// (BPF_PROG_TEST_RUN): the departure time it stamps, per kind of segment
// and write_delay_on, against the delay line's rules.
func TestEDTProgram(t *testing.T) {
	delays, beat := programMaps(t, 16)
	slow, other := netip.MustParseAddr("10.201.0.2"), netip.MustParseAddr("10.201.0.3")
	const read, write = 2 * time.Millisecond, 5 * time.Millisecond
	if err := delays.Put(ipv4Key(slow), [2]uint64{uint64(read), uint64(write)}); err != nil {
		t.Fatal(err)
	}
	for _, on := range []WriteOn{WriteOnReplies, WriteOnACKs} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: edtProgram(3260, on, delays.FD(), beat.FD())})
		if err != nil {
			t.Fatalf("%v: the kernel's verifier refused the program: %v", on, err)
		}
		replyDelay, ackDelay := max(read, write), time.Duration(0)
		if on == WriteOnACKs {
			replyDelay, ackDelay = read, write
		}
		later := monoNow() + uint64(time.Hour)
		for _, tc := range []struct {
			name   string
			frame  []byte
			stamp  uint64 // the skb's tstamp on entry
			lapsed bool
			delay  time.Duration // -1: the stamp must be left as it was
		}{
			{"a segment with payload", segment(3260, slow, 48), 0, false, replyDelay},
			{"a pure ACK", segment(3260, slow, 0), 0, false, ackDelay},
			{"another source port", segment(22, slow, 48), 0, false, 0},
			{"an unthrottled consumer", segment(3260, other, 48), 0, false, 0},
			{"a lapsed heartbeat fails open", segment(3260, slow, 48), 0, true, 0},
			{"the sender's later stamp is kept", segment(3260, slow, 48), later, false, -1},
		} {
			deadline := monoNow() + uint64(time.Minute)
			if tc.lapsed {
				deadline = monoNow() - 1
			}
			if err := beat.Put(uint32(0), deadline); err != nil {
				t.Fatal(err)
			}
			in := make([]byte, skbTstampOff+8)
			binary.NativeEndian.PutUint64(in[skbTstampOff:], tc.stamp)
			out := make([]byte, 256)
			before := monoNow()
			ret, err := prog.Run(&ebpf.RunOptions{Data: tc.frame, Context: in, ContextOut: out})
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
		prog.Close()
	}
}

// End to end on a veth: where the kernel has sch_fq, a delayed consumer's
// replies take the delay and its neighbour's do not, and Close gives the
// device its default qdisc back with nothing of ours left. Where it has
// none (this lab's 6.18), NewEDT refuses with ErrNoFq and leaves nothing:
// the stock-kernel tier (lab/guest) runs the first half.
func TestEDTDelaysOrRefusesCleanly(t *testing.T) {
	delaysOrRefuses(t, ErrNoFq, func() (bool, string) { return EDTAvailable() }, func(n *tcTestNet) (Throttle, error) {
		return NewEDT(EDTConfig{Device: n.devA, Label: n.label, Port: n.port})
	})
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
		return NewNetem(NetemConfig{Device: n.devA, Label: n.label, Port: n.port, MaxDelay: 40 * time.Millisecond})
	})
}

// delaysOrRefuses runs a kernel delay backend's end-to-end test where the
// kernel has what it needs (available), and otherwise checks that its
// constructor refuses with refusal and leaves the device as it was.
func delaysOrRefuses(t *testing.T, refusal error, available func() (bool, string), build func(*tcTestNet) (Throttle, error)) {
	n := newTCTestNet(t)
	n.enterA(t)
	l, err := netlink.LinkByName(n.devA)
	if err != nil {
		t.Fatal(err)
	}
	rootBefore := rootKind(t, l)
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
	delaysOneConsumer(t, n, th)
	assertDelayBackendGone(t, l, rootBefore)
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
