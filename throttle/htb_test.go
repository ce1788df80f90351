package throttle

import (
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/guestenv"
	"github.com/vishvananda/netlink"
)

func TestHTBPlanAndClasses(t *testing.T) {
	cfg := HTBConfig{tcConfig: tcConfig{Device: "eth9", Label: "sanqos"}, LinkRate: 125e6}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	p := cfg.plan(7)
	major := tcRootMajor("sanqos")
	if p.Root.Handle != netlink.MakeHandle(major, 0) || p.Root.Defcls != htbDefaultMinor {
		t.Errorf("root %+v", p.Root)
	}
	root, def := p.Classes[0], p.Classes[1]
	if root.Parent != netlink.MakeHandle(major, 0) || root.Rate != 125e6 || root.Ceil != 125e6 {
		t.Errorf("root class %+v", root)
	}
	// Everything unclassified lands here and is shaped with the rest:
	// nothing bypasses HTB through its direct queue.
	if def.Handle != netlink.MakeHandle(major, htbDefaultMinor) || def.Parent != root.Handle || def.Prio != 0 {
		t.Errorf("default class %+v", def)
	}
	h := &HTB{cfg: cfg, ifidx: 7, marks: tcMarkMap{Major: major, Mask: cfg.MarkMask}}
	c := h.consumerClass(0x10, 4<<20)
	if c.Parent != root.Handle || c.Rate != 4<<20 || c.Ceil != 4<<20 || c.Prio != 1 || c.Handle != netlink.MakeHandle(major, 0x10) {
		t.Errorf("consumer class %+v", c)
	}
	h.cfg.CeilFactor = 2
	if c := h.consumerClass(0x10, 100e6); c.Ceil != 125e6 {
		t.Errorf("ceil %d should stop at the link rate", c.Ceil)
	}
	if h.marks.mark(0x10) != 0x100000 || h.marks.classID(0x10) != c.Handle {
		t.Errorf("mark of minor 0x10: %#x", h.marks.mark(0x10))
	}
}

func TestHTBSetRejectsBeforeKernel(t *testing.T) {
	h := &HTB{cfg: HTBConfig{tcConfig: tcConfig{Device: "x"}, LinkRate: 1e9}, cur: map[netip.Addr]htbConsumer{}}
	a := netip.MustParseAddr("10.0.0.2")
	if err := h.Set(map[netip.Addr]Setting{a: {WriteDelay: time.Millisecond}}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("delay: %v", err)
	}
	if err := h.Set(map[netip.Addr]Setting{netip.MustParseAddr("fd00::1"): {Rate: 1000}}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("IPv6: %v", err)
	}
	if len(h.List()) != 0 {
		t.Error("state changed")
	}
}

// meter counts the bytes each connection receives.
type meter struct {
	n  []atomic.Int64
	wg sync.WaitGroup
}

func newMeter(conns []net.Conn) *meter {
	m := &meter{n: make([]atomic.Int64, len(conns))}
	for i, c := range conns {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			buf := make([]byte, 256<<10)
			for {
				k, err := c.Read(buf)
				m.n[i].Add(int64(k))
				if err != nil {
					return
				}
			}
		}()
	}
	return m
}

// rates discards warm (the bucket's burst, queues filling) and returns
// each connection's bytes/s over the following window.
// extra counters (e.g. a class's byte count) are sampled with the same
// window and appended to the result.
func (m *meter) rates(warm, window time.Duration, extra ...func() int64) []float64 {
	<-time.After(warm)
	snap := func() []int64 {
		s := make([]int64, len(m.n))
		for i := range m.n {
			s[i] = m.n[i].Load()
		}
		for _, f := range extra {
			s = append(s, f())
		}
		return s
	}
	a, t0 := snap(), time.Now()
	<-time.After(window)
	b, dt := snap(), time.Since(t0).Seconds()
	r := make([]float64, len(a))
	for i := range a {
		r[i] = float64(b[i]-a[i]) / dt
	}
	return r
}

// TestHTBRateCapInNamespaces is seed 001's experiment on a veth: a capped
// consumer next to an uncapped one, then a rate change at run time.
// It is one function because its phases (cap, change, clear, close) run
// in order on one HTB instance and one set of live streams, measured by
// one meter.
func TestHTBRateCapInNamespaces(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, n.port).String())
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	// The "target": sends to every consumer as fast as TCP lets it.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()

	h, err := NewHTB(HTBConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			h.Close()
		}
	})
	t.Logf("filter: %s, link rate %d B/s", h.filter, h.cfg.LinkRate)
	capped, free := n.addrsB[0], n.addrsB[1]
	const cap1, cap2 = 4 << 20, 8 << 20
	if err := h.Set(map[netip.Addr]Setting{capped: {Rate: cap1}}); err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	for _, src := range []netip.Addr{capped, free} {
		c, err := n.dialFromB(src)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		t.Cleanup(func() { c.Close() })
	}
	m := newMeter(clients)

	// The cap is enforced on what HTB counts: whole frames, headers
	// included. The class's byte counter shows that error; the payload
	// the consumer receives is lower by the header share (66 of 1514
	// bytes per full segment here), which the second check allows for.
	classBytes := func() int64 {
		cs, err := netlink.ClassList(h.link(), netlink.MakeHandle(h.marks.Major, 0))
		if err != nil {
			t.Error(err)
			return 0
		}
		id := netlink.MakeHandle(h.marks.Major, h.cur[capped].minor)
		for _, c := range cs {
			if c.Attrs().Handle == id && c.Attrs().Statistics != nil {
				return int64(c.Attrs().Statistics.Basic.Bytes)
			}
		}
		t.Errorf("class %s not found", tcHandleString(id))
		return 0
	}
	capErr := func(got, want float64) float64 { return math.Abs(got-want) / want }
	wireTol, payloadTol, neighbourX := rateTol(0.02), rateTol(0.06), neighbourFactor()
	if guestenv.Emulated() {
		t.Logf("emulated CPU: cap within %.0f %% on the wire, %.0f %% of payload", 100*wireTol, 100*payloadTol)
	}
	check := func(limit float64) {
		t.Helper()
		r := m.rates(time.Second, 3*time.Second, classBytes)
		t.Logf("cap %.0f B/s: on the wire %.0f B/s (error %.2f%%), payload %.0f B/s (%.2f%% below), uncapped neighbour %.0f B/s",
			limit, r[2], 100*capErr(r[2], limit), r[0], 100*(limit-r[0])/limit, r[1])
		if e := capErr(r[2], limit); e > wireTol {
			t.Errorf("capped class sends %.0f B/s, %.1f%% off its cap %.0f", r[2], 100*e, limit)
		}
		if e := capErr(r[0], limit); e > payloadTol {
			t.Errorf("capped consumer receives %.0f B/s, %.1f%% off its cap %.0f", r[0], 100*e, limit)
		}
		if r[1] < neighbourX*limit {
			t.Errorf("uncapped neighbour only %.0f B/s: it is being shaped", r[1])
		}
	}
	check(cap1)
	if err := h.Set(map[netip.Addr]Setting{capped: {Rate: cap2}}); err != nil {
		t.Fatal(err)
	}
	check(cap2)
	if got := h.List(); got[capped].Rate != cap2 || len(got) != 1 {
		t.Errorf("List = %v", got)
	}

	if err := Clear(h, capped); err != nil {
		t.Fatal(err)
	}
	r := m.rates(500*time.Millisecond, time.Second)
	t.Logf("released: %.0f B/s", r[0])
	if r[0] < 3*cap2 {
		t.Errorf("released consumer still at %.0f B/s", r[0])
	}

	closed = true
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	n.assertNothingLeft(t)
	for _, c := range clients {
		c.Close()
	}
	m.wg.Wait()
}

// HTB's marks match a set of ports (config ports): what a capped
// consumer receives from each port of the set goes through its class,
// what it receives from a port outside the set does not.
func TestHTBClassifiesEveryPortOfTheSet(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	in, other := []uint16{n.port, n.port + 1160}, n.port+1161 // 3260, 4420; 4421
	h, err := NewHTB(HTBConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: in}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	capped := n.addrsB[0]
	if err := h.Set(map[netip.Addr]Setting{capped: {Rate: 100 << 20}}); err != nil {
		t.Fatal(err)
	}
	classBytes := func() uint64 {
		cs, err := netlink.ClassList(h.link(), netlink.MakeHandle(h.marks.Major, 0))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Attrs().Handle == netlink.MakeHandle(h.marks.Major, h.cur[capped].minor) && c.Attrs().Statistics != nil {
				return c.Attrs().Statistics.Basic.Bytes
			}
		}
		t.Fatal("the capped consumer's class not found")
		return 0
	}
	const size = 256 << 10
	for _, port := range append(in, other) {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(n.addrA, port).String())
		if err != nil {
			t.Fatal(err)
		}
		var c net.Conn
		err = inNS(n.nsB, func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: capped.AsSlice()}}
			c, err = d.Dial("tcp", netip.AddrPortFrom(n.addrA, port).String())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		before := classBytes()
		go func() { s.Write(make([]byte, size)); s.Close() }()
		if got, err := io.Copy(io.Discard, c); err != nil || got != size {
			t.Fatalf("port %d: read %d bytes: %v", port, got, err)
		}
		c.Close()
		ln.Close()
		moved := classBytes() - before
		t.Logf("port %d: %d bytes through the consumer's class", port, moved)
		if inSet := port != other; inSet != (moved >= size) {
			t.Errorf("port %d (in the set: %v): %d bytes through the consumer's class for %d sent", port, inSet, moved, size)
		}
	}
}

// A crashed agent leaves its tree, rules and set behind; CleanupTC with
// its label (what a restarted agent runs first) removes all of them.
func TestHTBCleanupAfterCrash(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	h, err := NewHTB(HTBConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.crash) // a failure before the crash must not leave the guard running
	if err := h.Set(map[netip.Addr]Setting{n.addrsB[0]: {Rate: 1 << 20}, n.addrsB[1]: {Rate: 2 << 20}}); err != nil {
		t.Fatal(err)
	}
	h.crash()
	// A second instance with the same label replaces the stale one
	// instead of failing on it.
	h2, err := NewHTB(HTBConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	if err != nil {
		t.Fatalf("restart over stale objects: %v", err)
	}
	t.Cleanup(h2.crash)
	if len(h2.List()) != 0 {
		t.Error("new instance inherited consumers")
	}
	h2.crash()
	if err := CleanupTC(n.label); err != nil {
		t.Fatal(err)
	}
	n.assertNothingLeft(t)
}

// A dead agent's caps lapse by themselves: while the backend runs it keeps
// each consumer's set entry alive past the TTL; once it stops refreshing
// (as when killed: nothing is cleaned up), the kernel expires the entry
// within the TTL and the consumer's traffic falls to the default class.
func TestHTBCapsLapseWhenRefreshStops(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	const ttl = time.Second
	h, err := NewHTB(HTBConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}, TTL: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.crash) // a failure before the crash must not leave the guard running
	defer CleanupTC(n.label)
	c := n.addrsB[0]
	if err := h.Set(map[netip.Addr]Setting{c: {Rate: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	set := tcRateSet(n.label)
	member := func() bool {
		ok, err := netlink.IpsetTest(set, &netlink.IPSetEntry{IP: c.AsSlice()})
		if err != nil {
			t.Fatalf("ipset test: %v", err)
		}
		return ok
	}
	for start := time.Now(); time.Since(start) < 5*ttl/2; {
		if !member() {
			t.Fatalf("cap lapsed after %v while the backend was refreshing it", time.Since(start))
		}
	}
	h.crash() // the agent "dies": no refresh, no cleanup
	stopped := time.Now()
	for member() {
		if time.Since(stopped) > ttl+500*time.Millisecond {
			t.Fatalf("cap still in force %v after the refreshes stopped (TTL %v)", time.Since(stopped), ttl)
		}
	}
	t.Logf("cap lapsed %v after the last refresh could have happened", time.Since(stopped))
	if err := CleanupTC(n.label); err != nil {
		t.Fatal(err)
	}
	n.assertNothingLeft(t)
}

// crash stops what a killed agent's process stops: the refreshes and
// the guard; every kernel object stays.
func (t *HTB) crash() {
	t.lease.end()
	t.guard.end()
}

// rateTol is a cap test's bound on a rate's relative error: tol on a real
// CPU. Under an emulated one (the stock-kernel guest's TCG, on a host that
// may be busy) the senders and HTB's timers run at the emulator's pace:
// rates there missed 2 % and 8 % bounds by 2.6–11 % while the same code
// met them on this host. The guest runs these tests for the stock
// kernel's paths (fw marks, the IFB); the caps' accuracy is asserted on
// a real CPU.
func rateTol(tol float64) float64 {
	if guestenv.Emulated() {
		return 0.25
	}
	return tol
}

// neighbourFactor is how much faster than the cap an uncapped neighbour
// must run to show it is not shaped: less under an emulated CPU, whose
// senders are slow.
func neighbourFactor() float64 {
	if guestenv.Emulated() {
		return 1.5
	}
	return 5
}

func (t *HTB) link() netlink.Link {
	return &netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Index: t.ifidx, Name: t.cfg.Device}}
}
