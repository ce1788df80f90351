package sample

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

func resp(cookie uint32, peer string, port uint16, recv, acked uint64) *netlink.InetDiagTCPInfoResp {
	ap := netip.MustParseAddrPort(peer)
	return &netlink.InetDiagTCPInfoResp{
		InetDiagMsg: &netlink.Socket{State: 1, ID: netlink.SocketID{SourcePort: port, DestinationPort: ap.Port(), Destination: ap.Addr().AsSlice(), Cookie: [2]uint32{cookie, 0}}},
		TCPInfo:     &netlink.TCPInfo{Bytes_received: recv, Bytes_acked: acked, Rtt: 250},
	}
}

func TestTCPRatesPerConnection(t *testing.T) {
	rounds := [][]*netlink.InetDiagTCPInfoResp{
		{resp(1, "10.0.0.3:40000", 3260, 1000, 0), resp(2, "10.0.0.2:40001", 3260, 0, 500), resp(9, "10.0.0.9:22", 22, 0, 0)},
		// 10.0.0.3 wrote 1 MB; 10.0.0.2 reconnected (new cookie, counters
		// restarted): no negative rate, just a new baseline.
		{resp(1, "10.0.0.3:40000", 3260, 1001000, 0), resp(3, "10.0.0.2:40002", 3260, 0, 10)},
	}
	i := 0
	now := time.Unix(0, 0)
	tr := &TCPRates{Port: 3260, now: func() time.Time { return now }, dump: func(f uint8) ([]*netlink.InetDiagTCPInfoResp, error) {
		if f != 2 { // AF_INET only in this fixture
			return nil, nil
		}
		return rounds[i], nil
	}}
	if r, err := tr.Sample(); err != nil || r != nil {
		t.Fatalf("first sample is a baseline: %v %v", r, err)
	}
	i, now = 1, now.Add(time.Second)
	r, err := tr.Sample()
	if err != nil {
		t.Fatal(err)
	}
	w := netip.MustParseAddr("10.0.0.3")
	rd := netip.MustParseAddr("10.0.0.2")
	if r[w].WriteBps != 1e6 || r[w].ReadBps != 0 || r[w].SRTT != 250*time.Microsecond {
		t.Fatalf("writer %+v", r[w])
	}
	if r[rd].WriteBps != 0 || r[rd].ReadBps != 0 || r[rd].Conns != 1 {
		t.Fatalf("reconnected reader %+v", r[rd])
	}
	if _, ok := r[netip.MustParseAddr("10.0.0.9")]; ok {
		t.Fatal("another port's connection counted")
	}
}

// Against the real kernel: a loopback connection's bytes show up.
func TestTCPRatesKernel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan int64)
	done := make(chan struct{})
	defer close(done)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.CopyN(io.Discard, c, 1<<20)
		got <- n
		<-done // the server side stays established until the test ends
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr := NewTCPRates(uint16(l.Addr().(*net.TCPAddr).Port))
	if _, err := tr.Sample(); err != nil {
		t.Fatal(err)
	}
	<-tr.ConnChanges() // the first sample sees its connections appear
	if _, err := c.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 1<<20 {
		t.Fatalf("server read %d", n)
	}
	r, err := tr.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if r[netip.MustParseAddr("127.0.0.1")].WriteBps <= 0 {
		t.Fatalf("no write rate seen for the client: %+v", r)
	}
	if tr.sinceDump != 1 {
		t.Fatalf("second sample dumped (sinceDump %d): the known connection was not looked up exactly", tr.sinceDump)
	}
	// The exact lookup reads tcp_info by offset: on the now quiet
	// connection it must see what the dump (vishvananda/netlink's parser)
	// sees, field by field.
	byExact, err := tr.exact(tr.known)
	if err != nil {
		t.Fatal(err)
	}
	byDump, err := tr.dumpAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(byExact) != 1 || len(byDump) != 1 {
		t.Fatalf("exact %d, dump %d connections", len(byExact), len(byDump))
	}
	e, d := byExact[0].ti, byDump[0].ti
	if e.Snd_mss != d.Snd_mss || e.Unacked != d.Unacked || e.Rtt != d.Rtt || e.Rttvar != d.Rttvar ||
		e.Bytes_acked != d.Bytes_acked || e.Bytes_received != d.Bytes_received || e.Min_rtt != d.Min_rtt ||
		e.Delivery_rate != d.Delivery_rate || e.Bytes_received != 1<<20 {
		t.Fatalf("exact lookup %+v\ndump %+v", e, d)
	}
	tr.sinceDump = 1
	select {
	case <-tr.ConnChanges():
		t.Fatal("an exact lookup after a dump signalled a connection change")
	default:
	}
	// The connection goes: the exact lookup fails, the sample falls back
	// to a dump and the peer disappears.
	c.Close()
	if r, err = tr.Sample(); err != nil {
		t.Fatal(err)
	}
	if tr.sinceDump != 0 {
		t.Fatalf("no dump after the connection closed (sinceDump %d)", tr.sinceDump)
	}
	if n := r[netip.MustParseAddr("127.0.0.1")].Conns; n > 1 {
		t.Fatalf("closed connection still sampled: %+v", r)
	}
}

// Malformed exact-lookup replies are errors (the caller then dumps).
func TestParseDiagReply(t *testing.T) {
	if _, err := parseDiagReply(make([]byte, 10)); err == nil {
		t.Fatal("short reply accepted")
	}
	closing := make([]byte, inetDiagMsgLen)
	closing[1] = 8 // TCP_CLOSE_WAIT
	if _, err := parseDiagReply(closing); err == nil {
		t.Fatal("closing connection accepted")
	}
	established := make([]byte, inetDiagMsgLen)
	established[1] = tcpEstablished
	if _, err := parseDiagReply(established); err == nil {
		t.Fatal("reply without INET_DIAG_INFO accepted")
	}
}

// ConnChanges fires when connections come or go (not when only their
// counters move), and coalesces.
func TestTCPRatesConnChanges(t *testing.T) {
	rounds := [][]*netlink.InetDiagTCPInfoResp{
		{resp(1, "10.0.0.3:40000", 3260, 0, 0)},
		{resp(1, "10.0.0.3:40000", 3260, 5000, 0)},                                        // same set
		{resp(1, "10.0.0.3:40000", 3260, 9000, 0), resp(2, "10.0.0.4:40001", 3260, 0, 0)}, // login
		{resp(2, "10.0.0.4:40001", 3260, 10, 0)},                                          // logout
	}
	i := 0
	tr := &TCPRates{Port: 3260, now: time.Now, changed: make(chan struct{}, 1), dump: func(f uint8) ([]*netlink.InetDiagTCPInfoResp, error) {
		if f != 2 {
			return nil, nil
		}
		return rounds[i], nil
	}}
	changed := func() bool {
		select {
		case <-tr.ConnChanges():
			return true
		default:
			return false
		}
	}
	for k, want := range []bool{true, false, true, true} {
		i = k
		if _, err := tr.Sample(); err != nil {
			t.Fatal(err)
		}
		if got := changed(); got != want {
			t.Errorf("round %d: change signalled %v, want %v", k, got, want)
		}
	}
}

// An idle target (no connections) is dumped once per fullEvery samples,
// not every sample: a dump walks the whole established hash.
func TestTCPRatesIdleDumpsRarely(t *testing.T) {
	dumps := 0
	tr := &TCPRates{Port: 3260, now: time.Now,
		exact: func([]diagID) ([]connSample, error) { t.Fatal("lookup without known connections"); return nil, nil },
		dump: func(f uint8) ([]*netlink.InetDiagTCPInfoResp, error) {
			if f == 2 {
				dumps++
			}
			return nil, nil
		}}
	for i := 0; i < 3*fullEvery; i++ {
		if _, err := tr.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	if dumps != 3 {
		t.Fatalf("%d dumps in %d samples, want 3", dumps, 3*fullEvery)
	}
}
