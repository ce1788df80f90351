package throttle

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"
)

// IPv6 consumers on EDT, end to end on a veth with both families' addresses
// (in the stock-kernel guest; on a kernel without fq NewEDT refuses and
// leaves nothing): an IPv6 consumer is delayed beside an IPv4 one set in
// the same batch, their undelayed neighbours of each family are not, and
// clearing the IPv6 consumer ends its delay.
func TestEDTIPv6DelaysOrRefusesCleanly(t *testing.T) {
	withKernelBackend(t, ErrNoFq, func() (bool, string) { return EDTAvailable() }, func(n *tcTestNet) (Throttle, error) {
		return NewEDT(EDTConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	}, func(t *testing.T, n *tcTestNet, th Throttle) {
		delaysBothFamilies(t, n, th, true)
	})
}

// Where the kernel refuses the program's IPv6 part (forced here), EDT
// runs the IPv4 program: the IPv4 consumers of a batch are delayed, the
// IPv6 one is named in a RefusedError instead of refusing the batch, and
// clearing it is no error.
func TestEDTIPv4OnlyProgramDelaysOrRefusesCleanly(t *testing.T) {
	withKernelBackend(t, ErrNoFq, func() (bool, string) { return EDTAvailable() }, func(n *tcTestNet) (Throttle, error) {
		return NewEDT(EDTConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}, noIPv6: true})
	}, func(t *testing.T, n *tcTestNet, th Throttle) {
		delaysBothFamilies(t, n, th, false)
	})
}

// delaysBothFamilies gives an IPv4 and an IPv6 consumer a 20 ms read delay
// in one batch and measures the round trips of both and of a neighbour
// of each family; v6 says whether the IPv6 one must be delayed (else
// refused, by name). Then it clears the IPv6 consumer and measures it
// again, and closes the backend.
func delaysBothFamilies(t *testing.T, n *tcTestNet, th Throttle, v6 bool) {
	n.addIPv6(t)
	var lns []net.Listener
	for _, a := range []netip.Addr{n.addrA, n.addrA6} {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, n.port).String())
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		lns = append(lns, ln)
	}
	listener := func(a netip.Addr) net.Listener { return lns[map[bool]int{false: 0, true: 1}[a.Is6()]] }
	slow4, free4, slow6, free6 := n.addrsB[0], n.addrsB[1], n.addrsB6[0], n.addrsB6[1]
	const d = 20 * time.Millisecond
	err := th.Set(map[netip.Addr]Setting{slow4: {ReadDelay: d}, slow6: {ReadDelay: d}})
	refused, partial := Refused(err)
	switch _, named := refused[slow6]; {
	case v6 && err != nil:
		t.Fatal(err)
	case !v6 && (!partial || len(refused) != 1 || !named):
		t.Fatalf("Set: %v, want the IPv6 consumer alone refused", err)
	}
	rtt := func(src netip.Addr) time.Duration {
		c, s := n.connect(t, listener(src), src)
		return pct(pingPong(t, s.(*net.TCPConn), c.(*net.TCPConn), 30), 0.5)
	}
	p50 := map[netip.Addr]time.Duration{}
	for _, src := range []netip.Addr{slow4, free4, slow6, free6} {
		p50[src] = rtt(src)
	}
	t.Logf("%s: round trip p50: IPv4 delayed %v, neighbour %v; IPv6 %s %v, neighbour %v",
		th.Name(), p50[slow4], p50[free4], map[bool]string{true: "delayed", false: "refused"}[v6], p50[slow6], p50[free6])
	delayed := []netip.Addr{slow4}
	free := []netip.Addr{free4, free6}
	if v6 {
		delayed = append(delayed, slow6)
	} else {
		free = append(free, slow6)
	}
	// Above d+10ms is a delay taken twice; the stock kernel's guest, under
	// TCG on a loaded machine, adds up to ~8 ms of timer lateness.
	for _, a := range delayed {
		if p50[a] < d || p50[a] > d+10*time.Millisecond {
			t.Errorf("%v: round trip %v, want %v plus a little", a, p50[a], d)
		}
	}
	for _, a := range free {
		if p50[a] > 5*time.Millisecond {
			t.Errorf("%v: round trip %v: it is being delayed", a, p50[a])
		}
	}
	if err := Clear(th, slow6); err != nil {
		t.Fatalf("clear %v: %v", slow6, err)
	}
	if got := rtt(slow6); got > 5*time.Millisecond {
		t.Errorf("%v cleared: round trip %v, still delayed", slow6, got)
	}
	if _, still := th.List()[slow6]; still || th.List()[slow4].ReadDelay != d {
		t.Errorf("after clearing %v: List %v", slow6, th.List())
	}
	if err := th.Close(); err != nil {
		t.Fatal(err)
	}
}

// The delay line, on this machine's kernel too, delays an IPv6 consumer
// beside an IPv4 one set in the same batch (ip6tables queues IPv6).
func TestDelayLineIPv6BesideIPv4(t *testing.T) {
	withKernelBackend(t, nil, func() (bool, string) { return true, "" }, func(n *tcTestNet) (Throttle, error) {
		return NewDelayLine(DelayLineConfig{Queue: 11, Label: n.label, Ports: []uint16{n.port}})
	}, func(t *testing.T, n *tcTestNet, th Throttle) {
		delaysBothFamilies(t, n, th, true)
	})
}

// edtOnMaps is an EDT with its maps and lease but no qdisc or program:
// enough for Set, Clear and List, on any kernel with BPF maps (this
// machine's has no fq).
func edtOnMaps(t *testing.T, v6 bool) *EDT {
	t.Helper()
	e := &EDT{cur: map[netip.Addr]Setting{}}
	m4 := newEDTTestMaps(t, 4)
	e.consumers, e.last = m4.delays, m4.last
	if v6 {
		m6 := newEDTTestMaps(t, 16)
		e.consumers6, e.last6 = m6.delays, m6.last
	}
	var err error
	if e.lease, err = newBPFLease(time.Second, slog.New(slog.DiscardHandler), "edt delays"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.lease.close)
	return e
}

// Set, List and Clear (what `sanqos throttle set|list|clear` reach through
// the agent) on every form of address, with and without the IPv6 part:
// none panics (clearing an IPv6 consumer reached an IPv4-only key
// function that did); each consumer's delays land in its family's map
// under its key; a zone is no part of the key; without the IPv6 part an
// IPv6 consumer is refused by name and clearing it is no error; an
// invalid address is refused before any map changes.
func TestEDTSetAndClearEveryAddress(t *testing.T) {
	const d = 7 * time.Millisecond
	for _, v6 := range []bool{true, false} {
		for _, tc := range []struct {
			name   string
			a      netip.Addr
			listed netip.Addr // as List gives it back
		}{
			{"IPv4", netip.MustParseAddr("10.201.0.2"), netip.MustParseAddr("10.201.0.2")},
			{"IPv4-mapped IPv6", netip.MustParseAddr("::ffff:10.201.0.4"), netip.MustParseAddr("10.201.0.4")},
			{"IPv6", netip.MustParseAddr("fd00:201::2"), netip.MustParseAddr("fd00:201::2")},
			{"link-local with zone", netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("fe80::1")},
			{"invalid", netip.Addr{}, netip.Addr{}},
		} {
			t.Run(fmt.Sprintf("%s, IPv6 part %v", tc.name, v6), func(t *testing.T) {
				e := edtOnMaps(t, v6)
				k4, is4 := ipv4Key(tc.a)
				k6, is6 := ipv6Key(tc.a)
				err := e.Set(map[netip.Addr]Setting{tc.a: {ReadDelay: d, WriteDelay: d / 7}})
				refused, partial := Refused(err)
				switch {
				case !tc.a.IsValid():
					if err == nil || partial {
						t.Errorf("Set: %v, want the batch refused", err)
					}
				case is6 && !v6:
					if _, named := refused[tc.listed]; !named {
						t.Errorf("Set: %v, want %v named", err, tc.listed)
					}
				case err != nil:
					t.Fatalf("Set: %v", err)
				}
				applied := err == nil
				var got [2]uint64
				switch {
				case is4:
					err = e.consumers.Lookup(k4, &got)
				case is6 && v6:
					err = e.consumers6.Lookup(k6, &got)
				}
				if applied && (err != nil || got != [2]uint64{uint64(d), uint64(d / 7)}) {
					t.Errorf("map entry %v, %v; want the delays under its key", got, err)
				}
				if l := e.List(); applied != (len(l) == 1 && l[tc.listed] == Setting{ReadDelay: d, WriteDelay: d / 7}) {
					t.Errorf("List %v after Set (applied %v)", l, applied)
				}
				err = Clear(e, tc.a)
				if tc.a.IsValid() != (err == nil) {
					t.Errorf("Clear: %v", err)
				}
				if n := len(e.List()); n != 0 {
					t.Errorf("List %v after Clear", e.List())
				}
				if is4 && e.consumers.Lookup(k4, &got) == nil || is6 && v6 && e.consumers6.Lookup(k6, &got) == nil {
					t.Error("map entry left after Clear")
				}
			})
		}
	}
}
