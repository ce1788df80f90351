package nvmetcp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/iscsipdu"
)

// testdata/guest-nvme.pcap.gz is NVMe/TCP between the kernel's host and
// target in the stock-kernel guest (Debian 6.1), captured on bm's eth0
// (sanqos capture --pcap) while b3 reconnected to vg1 with one I/O queue
// and ran 64 KiB random reads and writes (writes above the 16 KiB
// in-capsule size: R2T, H2CData), b4 reconnected with SQ flow control
// disabled (its reads end at a C2HData with SUCCESS, no response
// capsule) and read, and b5 reconnected with header and data digests and
// read. Replayed through iscsipdu's reassembler: every Connect is read,
// nearly every command seen is answered, each stream finds its place
// again after what the capture got wrong.
//
// What it got wrong: the kernel's host sends a PDU's header from the
// request's own buffer without copying it (sendpage), and reuses that
// buffer for the request's next PDU (the command capsule's for its
// H2CData header once the R2T comes). Over veth the receiving side's
// AF_PACKET socket holds a clone of the sender's pages and copies them
// when it reads, by which time a few headers were overwritten: a write's
// capsule reads as its H2CData header. The target read the right bytes
// at once. A capture on a physical NIC copies nothing the sender still
// owns; in the lab the parser resynchronises at the next header.
func TestGuestCapture(t *testing.T) {
	zr := testenv.Gunzip(t, "testdata/guest-nvme.pcap.gz")
	var samples []Sample
	tr := NewTracker(Options{}, func(s Sample) { samples = append(samples, s) })
	re := iscsipdu.NewReassembler(tr)
	const port = 4420
	err := capture.ReadPcap(zr, func(pkt []byte, ts time.Time) {
		s, ok := capture.Decode(pkt, ts)
		if !ok {
			return
		}
		s.Src = netip.AddrPortFrom(s.Src.Addr().Unmap(), s.Src.Port())
		s.Dst = netip.AddrPortFrom(s.Dst.Addr().Unmap(), s.Dst.Port())
		var f Flow
		var d Direction
		switch {
		case s.Dst.Port() == port:
			f, d = Flow{Initiator: s.Src, Target: s.Dst}, ToTarget
		case s.Src.Port() == port:
			f, d = Flow{Initiator: s.Dst, Target: s.Src}, ToInitiator
		default:
			return
		}
		re.Segment(f, d, s.Seq, s.Payload, ts)
		if s.Flags&(capture.FIN|capture.RST) != 0 {
			re.Close(f)
			tr.Close(f)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	c := tr.Counters()
	t.Logf("counters %+v, gaps %d, %d samples", c, re.Gaps, len(samples))
	// Each reconnect is an admin queue and its I/O queues (b3 one, b4
	// and b5 two: the guest's CPUs).
	if c.Connects < 2+3+3 || c.Resyncs > 1024 || re.Gaps != 0 {
		t.Errorf("counters %+v, gaps %d: want every queue's Connect, few bytes resynced", c, re.Gaps)
	}
	if c.DataSuccess == 0 || c.R2Ts == 0 {
		t.Errorf("counters %+v: want reads completed by C2HData SUCCESS (b4) and R2Ts (b3's writes)", c)
	}
	// The capture began with the lab's connections mid-stream: what they
	// had in flight then is answered unseen.
	if c.Unmatched > 16 || c.Completed < 200 {
		t.Errorf("%d completions unmatched", c.Unmatched)
	}
	hosts := map[netip.Addr]string{}
	for f, cn := range tr.Connections() {
		if cn.SubNQN != "nqn.2026-11.lab:vg1" {
			t.Errorf("%v: Connect to %q", f, cn.SubNQN)
		}
		hosts[f.Initiator.Addr()] = cn.HostNQN
	}
	for _, h := range []string{"b3", "b4", "b5"} {
		a := netip.MustParseAddr("10.99.0." + h[1:])
		if hosts[a] != "nqn.2026-11.lab:"+h {
			t.Errorf("connections of %v: host NQN %q", a, hosts[a])
		}
	}
	type opKey struct {
		host netip.Addr
		op   Op
	}
	n := map[opKey]int{}
	for _, s := range samples {
		if s.Status != 0 || s.Latency <= 0 || s.Latency > 10*time.Second {
			t.Errorf("sample %+v", s)
		}
		n[opKey{s.Host, s.Op}]++
	}
	b3, b4, b5 := netip.MustParseAddr("10.99.0.3"), netip.MustParseAddr("10.99.0.4"), netip.MustParseAddr("10.99.0.5")
	if n[opKey{b3, OpRead}] == 0 || n[opKey{b3, OpWrite}] == 0 || n[opKey{b4, OpRead}] == 0 || n[opKey{b5, OpRead}] == 0 {
		t.Errorf("commands timed per host and op: %v", n)
	}
}
