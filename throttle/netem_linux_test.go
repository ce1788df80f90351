package throttle

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"golang.org/x/sys/unix"
)

// TestNetemMarksByWriteOn runs the netem backend's marking half (its
// mangle chains and ipsets; the tc half needs netem, which this kernel
// lacks) and sends a pure ACK and a segment with payload from the target
// port to a consumer with a read and a write delay. Each packet's mark
// is the netem step it would wait in: with acks the ACK takes the write
// step and the data the read step; with replies (the default) the ACK
// passes unmarked and the data takes the larger step, as in the delay
// line. The consumer then moves to other steps (one ipset add replacing
// its entries' marks) and back to none. Raw sends run the hooks
// synchronously, so the counters are final when sendto returns. No
// subtests: the test's thread is in the namespace, a subtest's goroutine
// would not be.
func TestNetemMarksByWriteOn(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	fd, ipt := markProbe(t)
	consumer, bystander := n.addrsB[0], n.addrsB[1]
	var ne *Netem
	closeNetem := func() {}
	defer func() { closeNetem() }()
	ms := time.Millisecond
	for round, tc := range []struct {
		on        WriteOn
		set       Setting
		ack, data int // steps
	}{
		{WriteOnACKs, Setting{ReadDelay: ms, WriteDelay: 3 * ms}, 6, 2},
		{WriteOnACKs, Setting{ReadDelay: 5 * ms, WriteDelay: 2 * ms}, 4, 10},
		{WriteOnACKs, Setting{WriteDelay: 3 * ms}, 6, 0}, // only in the w set: the hook's second jump
		{WriteOnACKs, Setting{}, 0, 0},
		{WriteOnReplies, Setting{ReadDelay: ms, WriteDelay: 3 * ms}, 0, 6},
		{WriteOnReplies, Setting{ReadDelay: 4 * ms}, 0, 8},
		{WriteOnReplies, Setting{}, 0, 0},
	} {
		if ne == nil || ne.cfg.WriteOn != tc.on {
			closeNetem()
			ne, closeNetem = markingNetem(t, NetemConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}, WriteOn: tc.on})
		}
		if err := ne.Set(map[netip.Addr]Setting{consumer: tc.set}); err != nil {
			t.Fatal(err)
		}
		if got := ne.List()[consumer]; got != tc.set {
			t.Errorf("%v: List: %+v, want the setting as given %+v", tc.on, got, tc.set)
		}
		// Whatever the steps, one rule per chain marks them all.
		for _, ch := range tcChains(n.label)[1:] {
			rules, err := ipt.List("mangle", ch)
			if err != nil {
				t.Fatal(err)
			}
			if len(rules) != 2 { // "-N chain" and the SET rule
				t.Errorf("%v %+v: chain %s has %d rules, want 1: %q", tc.on, tc.set, ch, len(rules)-1, rules)
			}
		}
		m := ne.plan.Marks
		for i, p := range []struct {
			dst     netip.Addr
			payload int
			step    int
		}{
			{consumer, 0, tc.ack},
			{consumer, 8, tc.data},
			{bystander, 0, 0},
			{bystander, 8, 0},
		} {
			dport := uint16(40001 + 10*round + i) // fresh counters each round
			count := markCounter(t, ipt, dport, m.mark(uint32(p.step)), m.Mask)
			sendSegment(t, fd, n.addrA, p.dst, n.port, dport, p.payload)
			if got := count(); got != 1 {
				t.Errorf("%v %+v: %v, %d payload bytes: %d packets with step %d's mark %#x, want 1", tc.on, tc.set, p.dst, p.payload, got, p.step, m.mark(uint32(p.step)))
			}
		}
	}
}

// markProbe opens what a test of the marking sends and counts with, in
// the namespace the test's thread is in: a raw socket (closed when the
// test ends) and iptables.
func markProbe(t *testing.T) (fd int, ipt *iptables.IPTables) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	ipt, err = iptables.New()
	if err != nil {
		t.Fatal(err)
	}
	return fd, ipt
}

// markingNetem builds netem's marking half with cfg (its mangle chains
// and ipsets; the tc half needs the netem qdisc) in the namespace the
// caller's thread is in. undo closes its ipset socket and removes what
// CleanupTC finds of cfg's label; a second call does nothing.
func markingNetem(tb testing.TB, cfg NetemConfig) (ne *Netem, undo func()) {
	tb.Helper()
	if err := cfg.defaults(); err != nil {
		tb.Fatal(err)
	}
	ne = &Netem{cfg: cfg, plan: cfg.plan(0), cur: map[netip.Addr]netemState{}}
	done := false
	undo = func() {
		if done {
			return
		}
		done = true
		ne.ipset.close()
		if err := CleanupTC(cfg.Label); err != nil {
			tb.Error(err)
		}
	}
	if err := ne.buildMarking(); err != nil {
		undo()
		tb.Fatal(err)
	}
	return ne, undo
}

// markCounter adds a rule after ours in mangle POSTROUTING that counts
// segments to dport with mark under mask, and returns its reader.
func markCounter(t *testing.T, ipt *iptables.IPTables, dport uint16, mark, mask uint32) func() uint64 {
	t.Helper()
	comment := fmt.Sprintf("sqt-count-%d", dport)
	spec := []string{"-p", "tcp", "--dport", fmt.Sprint(dport), "-m", "mark", "--mark", fmt.Sprintf("%#x/%#x", mark, mask), "-m", "comment", "--comment", comment}
	if err := ipt.Append("mangle", "POSTROUTING", spec...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ipt.Delete("mangle", "POSTROUTING", spec...) })
	return func() uint64 {
		rules, err := ipt.ListWithCounters("mangle", "POSTROUTING")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			// "-A POSTROUTING … --comment sqt-count-N -c packets bytes"
			f := strings.Fields(r)
			if i := slices.Index(f, "-c"); strings.Contains(r, comment) && i >= 0 && i+1 < len(f) {
				n, err := strconv.ParseUint(f[i+1], 10, 64)
				if err != nil {
					t.Fatalf("counter in %q: %v", r, err)
				}
				return n
			}
		}
		t.Fatalf("counter %s not found", comment)
		return 0
	}
}

// sendSegment sends a bare TCP ACK segment with payload bytes of data.
func sendSegment(t *testing.T, fd int, src, dst netip.Addr, sport, dport uint16, payload int) {
	t.Helper()
	pkt := make([]byte, 40+payload)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_TCP // the kernel fills in the checksum
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	copy(pkt[12:16], src.AsSlice())
	copy(pkt[16:20], dst.AsSlice())
	tcp := pkt[20:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	tcp[12], tcp[13] = 5<<4, 0x10 // header length, ACK
	if payload > 0 {
		tcp[13] |= 0x08 // PSH
	}
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.As4()}); err != nil {
		t.Fatal(err)
	}
}
