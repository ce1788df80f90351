package throttle

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

func TestEBPFLeaseProgram(t *testing.T) {
	for _, c := range []struct {
		port uint16
		n    int // instructions
	}{{0, 30}, {3260, 32}} {
		p := ebpfLeaseProgram(42, c.port)
		if len(p) != c.n {
			t.Errorf("port %d: %d instructions, want %d", c.port, len(p), c.n)
		}
		miss := len(p) - 2
		if p[miss] != (ebpfInsn{Code: ebpfMov64K}) || p[len(p)-1].Code != ebpfExit {
			t.Errorf("port %d: program does not end in the miss branch: %+v", c.port, p[miss:])
		}
		// Every conditional jump goes to the miss branch, and only the
		// path that passes all of them returns -1 (match).
		jumps := 0
		for i, in := range p {
			switch in.Code {
			case ebpfJneK, ebpfJeqK, ebpfJeqX, ebpfJgeX:
				jumps++
				if i+1+int(in.Off) != miss {
					t.Errorf("port %d: jump %d lands on %d, not the miss at %d", c.port, i, i+1+int(in.Off), miss)
				}
			case ebpfLdImm64:
				if in.Src != ebpfPseudoMapFD || in.Imm != 42 || p[i+1] != (ebpfInsn{}) {
					t.Errorf("port %d: map load %+v %+v", c.port, in, p[i+1])
				}
			}
		}
		if want := map[uint16]int{0: 4, 3260: 5}[c.port]; jumps != want {
			t.Errorf("port %d: %d jumps, want %d", c.port, jumps, want)
		}
		if p[miss-2] != (ebpfInsn{Code: ebpfMov64K, Imm: -1}) {
			t.Errorf("port %d: match returns %+v", c.port, p[miss-2])
		}
		if c.port != 0 && p[8] != (ebpfInsn{Code: ebpfJneK, Off: p[8].Off, Imm: int32(c.port)}) {
			t.Errorf("port test %+v", p[8])
		}
		b := serializeEBPF(p)
		if len(b) != 8*len(p) {
			t.Fatalf("serialised %d bytes", len(b))
		}
		// mov r6, r1: dst in the low nibble on little-endian hosts.
		if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 && !bytes.Equal(b[:8], []byte{0xbf, 0x16, 0, 0, 0, 0, 0, 0}) {
			t.Errorf("first instruction % x", b[:8])
		}
	}
}

func TestLeaseKeyAndLeaf(t *testing.T) {
	// The program stores the host-order word LD_ABS returns; the key must
	// be those bytes.
	k := leaseKey(netip.MustParseAddr("10.201.0.2"))
	if binary.NativeEndian.Uint32(k) != 0x0ac90002 {
		t.Errorf("key % x", k)
	}
	if k2 := leaseKey(netip.MustParseAddr("::ffff:10.201.0.2")); !bytes.Equal(k, k2) {
		t.Errorf("mapped address key % x", k2)
	}
	for _, c := range []struct {
		rmem uint64
		want uint32
	}{
		{0, tcLeafBytes},                     // never below the egress leaf
		{6 << 20, 8 * (6 << 20) * 17 / 16},   // Linux's default tcp_rmem max
		{32 << 20, 8 * (32 << 20) * 17 / 16}, // this machine's
		{1 << 40, 1 << 31},                   // absurd sysctl: capped
	} {
		if got := ingressLeafBytes(c.rmem); got != c.want {
			t.Errorf("ingressLeafBytes(%d) = %d, want %d", c.rmem, got, c.want)
		}
	}
	if n := ifbName("a-very-long-label-20"); len(n) > 15 || n == ifbName("sanqos-htb") {
		t.Errorf("ifb name %q", n)
	}
}

func TestIngressRedirectRequest(t *testing.T) {
	s := ingressRedirectSpec{Ifindex: 7, Parent: netlink.HANDLE_MIN_INGRESS, Prio: 0x5123, Name: "sanqos-tc:x", ProgFD: 9, IFBIndex: 11}
	req, err := s.request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	b := req.Serialize()
	msg := nl.DeserializeTcMsg(b[unix.NLMSG_HDRLEN:])
	if msg.Ifindex != 7 || msg.Parent != netlink.HANDLE_MIN_INGRESS || msg.Handle != 1 || msg.Info != netlink.MakeHandle(0x5123, nl.Swap16(unix.ETH_P_IP)) {
		t.Errorf("tcmsg %+v", msg)
	}
	attrs, err := nl.ParseRouteAttr(b[unix.NLMSG_HDRLEN+nl.SizeofTcMsg:])
	if err != nil {
		t.Fatal(err)
	}
	var opts map[uint16][]byte
	for _, a := range attrs {
		switch a.Attr.Type {
		case nl.TCA_KIND:
			if string(a.Value) != "bpf\x00" {
				t.Errorf("kind %q", a.Value)
			}
		case nl.TCA_OPTIONS:
			in, _ := nl.ParseRouteAttr(a.Value)
			opts = map[uint16][]byte{}
			for _, x := range in {
				opts[x.Attr.Type] = x.Value
			}
		}
	}
	if binary.NativeEndian.Uint32(opts[nl.TCA_BPF_FD]) != 9 || string(opts[nl.TCA_BPF_NAME]) != "sanqos-tc:x\x00" {
		t.Errorf("options %v", opts)
	}
	if _, ok := opts[nl.TCA_BPF_FLAGS]; ok {
		t.Error("direct-action set: the mirred action would not run")
	}
	acts, err := nl.ParseRouteAttr(opts[nl.TCA_BPF_ACT])
	if err != nil || len(acts) != 1 || !bytes.Contains(acts[0].Value, []byte("mirred\x00")) {
		t.Errorf("actions %v %v", acts, err)
	}
	// A delete (what FilterDel sends) names the filter only.
	del, _ := s.request(unix.RTM_DELTFILTER, 0)
	if bytes.Contains(del.Serialize(), []byte("mirred")) {
		t.Error("delete carries options")
	}
}

// assertNoIngress checks namespace A for any trace of the write caps.
func (n *tcTestNet) assertNoIngress(t *testing.T) {
	t.Helper()
	if _, err := netlink.LinkByName(ifbName(n.label)); err == nil {
		t.Errorf("ifb %s left", ifbName(n.label))
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Type() == "ifb" {
			t.Errorf("ifb %s left", l.Attrs().Name)
		}
		qs, _ := netlink.QdiscList(l)
		for _, q := range qs {
			if q.Type() == "clsact" || q.Type() == "ingress" {
				t.Errorf("%s qdisc left on %s", q.Type(), l.Attrs().Name)
			}
		}
		for _, p := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.MakeHandle(0xffff, 0)} {
			if fs, err := netlink.FilterList(l, p); err == nil && len(fs) > 0 {
				t.Errorf("ingress filters left on %s: %v", l.Attrs().Name, fs)
			}
		}
	}
}

// snmpRetrans reads Tcp RetransSegs of namespace ns.
func snmpRetrans(t *testing.T, n *tcTestNet) int64 {
	t.Helper()
	var v int64 = -1
	err := inNS(n.nsB, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i++ {
			h, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			if len(h) == 0 || h[0] != "Tcp:" || len(vals) != len(h) {
				continue
			}
			for j := range h {
				if h[j] == "RetransSegs" {
					v, _ = strconv.ParseInt(vals[j], 10, 64)
				}
			}
			break
		}
		return nil
	})
	if err != nil || v < 0 {
		t.Fatalf("RetransSegs of B: %v", err)
	}
	return v
}

// TestHTBWriteCapInNamespaces caps what a consumer in B sends to a
// listener in A (its writes), next to an uncapped neighbour, and checks
// that nothing is dropped or retransmitted; then that the cap lapses when
// the lease is no longer refreshed, and that Close leaves nothing.
func TestHTBWriteCapInNamespaces(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	// The "target" reads as fast as it can; the meter counts by peer.
	var mu sync.Mutex
	var accepted []net.Conn
	byPeer := map[netip.Addr]int{}
	acceptedAll := make(chan struct{})
	go func() {
		for len(accepted) < 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			byPeer[c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()] = len(accepted)
			accepted = append(accepted, c)
			mu.Unlock()
		}
		close(acceptedAll)
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range accepted {
			c.Close()
		}
		mu.Unlock()
	})

	const ttl = time.Second
	h, err := NewHTB(HTBConfig{Device: n.devA, Label: n.label, Port: n.port, MarkTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			h.Close()
		}
	})
	if h.ing != nil {
		t.Fatal("ifb built before any write cap")
	}
	capped, free := n.addrsB[0], n.addrsB[1]
	const wcap = 4 << 20
	if err := h.Set(map[netip.Addr]Setting{capped: {WriteRate: wcap}}); err != nil {
		t.Fatal(err)
	}
	if got := h.List(); len(got) != 1 || got[capped] != (Setting{WriteRate: wcap}) {
		t.Errorf("List = %v", got)
	}
	retrans0 := snmpRetrans(t, n)
	var senders []net.Conn
	var wg sync.WaitGroup
	for _, src := range []netip.Addr{capped, free} {
		c, err := n.dialFromB(src)
		if err != nil {
			t.Fatal(err)
		}
		senders = append(senders, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		for _, c := range senders {
			c.Close()
		}
		wg.Wait()
	})
	select {
	case <-acceptedAll:
	case <-time.After(5 * time.Second):
		t.Fatal("connections not accepted")
	}
	mu.Lock()
	m := newMeter(accepted)
	ic, ifree := byPeer[capped], byPeer[free]
	mu.Unlock()

	r := m.rates(time.Second, 2*time.Second)
	// What the writer keeps queued in its class: bounded by its window
	// (our receive buffer), far below the leaf.
	var backlog uint32
	if l, err := netlink.LinkByName(ifbName(n.label)); err == nil {
		qs, _ := netlink.QdiscList(l)
		for _, q := range qs {
			if st := q.Attrs().Statistics; st != nil && st.Queue != nil && q.Attrs().Parent == netlink.MakeHandle(h.ing.major, h.ing.cur[capped].minor) {
				backlog = st.Queue.Backlog
			}
		}
	}
	drops, err := ifbDrops(n.label)
	if err != nil {
		t.Fatal(err)
	}
	retrans := snmpRetrans(t, n) - retrans0
	var perConn []uint32
	for _, c := range senders {
		perConn = append(perConn, tcpRetrans(t, c.(*net.TCPConn)))
	}
	t.Logf("write cap %d B/s: capped writer %.0f B/s (%.1f%% off), uncapped neighbour %.0f B/s; ifb drops %d; B retransmissions %d (per connection %v); queued %d of the leaf's %d bytes",
		wcap, r[ic], 100*(r[ic]-wcap)/wcap, r[ifree], drops, retrans, perConn, backlog, h.ing.leaf)
	if e := math.Abs(r[ic]-wcap) / wcap; e > 0.2 {
		t.Errorf("capped writer sends %.0f B/s, %.0f%% off its cap %d", r[ic], 100*e, wcap)
	}
	if r[ifree] < 5*wcap {
		t.Errorf("uncapped neighbour only %.0f B/s: it is being shaped", r[ifree])
	}
	if drops != 0 {
		t.Errorf("ifb qdiscs dropped %d packets", drops)
	}
	// The namespace's counter also holds the uncapped neighbour's: bulk
	// TCP over a bare veth at 1–2 GB/s overflows the receive backlog
	// (netdev_max_backlog) and retransmits thousands of segments with no
	// throttle at all (8060 in 2 s, measured here), so the capped
	// writer's own count is the one that must be zero.
	if perConn[0] != 0 {
		t.Errorf("capped writer retransmitted %d segments (B total %d)", perConn[0], retrans)
	}

	// A changed cap is one class change: the writer follows it.
	const wcap2 = 8 << 20
	if err := h.Set(map[netip.Addr]Setting{capped: {WriteRate: wcap2}}); err != nil {
		t.Fatal(err)
	}
	r = m.rates(time.Second, 2*time.Second)
	t.Logf("write cap %d B/s: capped writer %.0f B/s (%.1f%% off)", wcap2, r[ic], 100*(r[ic]-wcap2)/wcap2)
	if e := math.Abs(r[ic]-wcap2) / wcap2; e > 0.2 {
		t.Errorf("capped writer sends %.0f B/s, %.0f%% off its new cap %d", r[ic], 100*e, wcap2)
	}
	if d, _ := ifbDrops(n.label); d != 0 || tcpRetrans(t, senders[0].(*net.TCPConn)) != 0 {
		t.Errorf("after the change: ifb drops %d, capped writer retransmissions %d", d, tcpRetrans(t, senders[0].(*net.TCPConn)))
	}

	// The agent "dies": no more refreshes. Within the TTL the redirect
	// stops and the writer runs free, although every object is still in
	// place (nobody cleaned up).
	h.lease.end()
	time.Sleep(ttl + 200*time.Millisecond)
	r = m.rates(300*time.Millisecond, time.Second)
	t.Logf("lease lapsed: formerly capped writer %.0f B/s", r[ic])
	if r[ic] < 5*wcap {
		t.Errorf("write cap still in force %v after the last refresh: %.0f B/s", ttl+500*time.Millisecond, r[ic])
	}
	if _, err := netlink.LinkByName(ifbName(n.label)); err != nil {
		t.Errorf("ifb gone already: %v", err)
	}
	if d, _ := ifbDrops(n.label); d != 0 {
		t.Errorf("ifb qdiscs dropped %d packets", d)
	}

	if err := h.Clear(capped); err != nil {
		t.Fatal(err)
	}
	if len(h.List()) != 0 {
		t.Errorf("List after Clear = %v", h.List())
	}
	closed = true
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	n.assertNothingLeft(t)
	n.assertNoIngress(t)
}

// A crashed agent leaves IFB, redirect and clsact behind; the next start
// (NewHTB runs CleanupTC with its label) and CleanupTC remove them. A
// read-only user never gets an IFB.
func TestHTBWriteCapCleanupAfterCrash(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	h, err := NewHTB(HTBConfig{Device: n.devA, Label: n.label, Port: n.port})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Set(map[netip.Addr]Setting{n.addrsB[0]: {Rate: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	n.assertNoIngress(t)
	if err := h.Set(map[netip.Addr]Setting{n.addrsB[0]: {Rate: 1 << 20, WriteRate: 1 << 20}, n.addrsB[1]: {WriteRate: 2 << 20}}); err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]Setting{n.addrsB[0]: {Rate: 1 << 20, WriteRate: 1 << 20}, n.addrsB[1]: {WriteRate: 2 << 20}}
	if got := h.List(); len(got) != 2 || got[n.addrsB[0]] != want[n.addrsB[0]] || got[n.addrsB[1]] != want[n.addrsB[1]] {
		t.Errorf("List = %v", got)
	}
	if _, err := netlink.LinkByName(ifbName(n.label)); err != nil {
		t.Fatalf("no ifb: %v", err)
	}
	h.lease.end() // crash: nothing cleaned up, fds die with the process
	h.ing.lease.close()
	h2, err := NewHTB(HTBConfig{Device: n.devA, Label: n.label, Port: n.port})
	if err != nil {
		t.Fatalf("restart over stale objects: %v", err)
	}
	n.assertNoIngress(t)
	if len(h2.List()) != 0 {
		t.Error("new instance inherited consumers")
	}
	// And the restarted instance can cap writes again.
	if err := h2.Set(map[netip.Addr]Setting{n.addrsB[1]: {WriteRate: 2 << 20}}); err != nil {
		t.Fatal(err)
	}
	h2.lease.end()
	h2.ing.lease.close()
	if err := CleanupTC(n.label); err != nil {
		t.Fatal(err)
	}
	n.assertNothingLeft(t)
	n.assertNoIngress(t)
}

// All or nothing inside the htb backend: when the write side fails, the
// read caps set in the same batch are undone.
func TestHTBWriteCapAllOrNothing(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	h, err := NewHTB(HTBConfig{Device: n.devA, Label: n.label, Port: n.port})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	a, b := n.addrsB[0], n.addrsB[1]
	if err := h.Set(map[netip.Addr]Setting{a: {Rate: 1 << 20, WriteRate: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	// Exhaust the write classes so the next new write cap fails.
	for m := uint16(htbFirstConsumer); m <= ingressMaxMinor; m++ {
		h.ing.minor[m] = true
	}
	err = h.Set(map[netip.Addr]Setting{a: {Rate: 3 << 20, WriteRate: 1 << 20}, b: {Rate: 2 << 20, WriteRate: 2 << 20}})
	if err == nil {
		t.Fatal("batch succeeded with no write class left")
	}
	t.Logf("refused: %v", err)
	got := h.List()
	if len(got) != 1 || got[a] != (Setting{Rate: 1 << 20, WriteRate: 1 << 20}) {
		t.Errorf("state changed by a failed batch: %v", got)
	}
}

// ifbPackets counts what the IFB's root qdisc has seen.
func ifbPackets(t *testing.T, label string) uint32 {
	t.Helper()
	l, err := netlink.LinkByName(ifbName(label))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT && q.Attrs().Statistics != nil {
			return q.Attrs().Statistics.Basic.Packets
		}
	}
	t.Fatal("no root qdisc on the ifb")
	return 0
}

// A write-capped consumer's reads are not slowed: the ACKs it sends for
// them are not redirected, so they never wait behind its capped writes.
// Its data segments are.
func TestHTBWriteCapLetsPureACKsPass(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, err := NewHTB(HTBConfig{Device: n.devA, Label: n.label, Port: n.port})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c := n.addrsB[0]
	if err := h.Set(map[netip.Addr]Setting{c: {WriteRate: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		accepted <- s
	}()
	p0 := ifbPackets(t, n.label)
	cl, err := n.dialFromB(c)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	srv := <-accepted
	defer srv.Close()
	// The target sends 32 MiB (the consumer reads): everything the
	// consumer sends back is a pure ACK.
	go func() {
		buf := make([]byte, 1<<20)
		for range 32 {
			if _, err := srv.Write(buf); err != nil {
				return
			}
		}
	}()
	got, buf := 0, make([]byte, 1<<20)
	for got < 32<<20 {
		k, err := cl.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	if d := ifbPackets(t, n.label) - p0; d != 0 {
		t.Errorf("%d of the reader's pure ACKs (or handshake) went through the ifb", d)
	}
	// Its writes do go through it.
	if _, err := cl.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(srv, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if d := ifbPackets(t, n.label) - p0; d == 0 {
		t.Error("the consumer's write data bypassed the ifb")
	} else {
		t.Logf("write of 64 KiB: %d packets through the ifb; 32 MiB read: none", d)
	}
}
