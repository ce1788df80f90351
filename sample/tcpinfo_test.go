package sample

import (
	"encoding/binary"
	"io"
	"math"
	"net"
	"net/netip"
	"syscall"
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

// encodeReply is resp as the kernel sends it: an inet_diag_msg and its
// INET_DIAG_INFO (the tcp_info fields the sampler reads).
func encodeReply(fam uint8, r *netlink.InetDiagTCPInfoResp) []byte {
	m, ti := r.InetDiagMsg, r.TCPInfo
	b := make([]byte, inetDiagMsgLen, inetDiagMsgLen+4+232)
	b[0], b[1] = fam, m.State
	binary.BigEndian.PutUint16(b[4:], m.ID.SourcePort)
	binary.BigEndian.PutUint16(b[6:], m.ID.DestinationPort)
	copy(b[24:40], m.ID.Destination)
	binary.NativeEndian.PutUint32(b[44:], m.ID.Cookie[0])
	binary.NativeEndian.PutUint32(b[48:], m.ID.Cookie[1])
	if ti == nil {
		return b
	}
	info := make([]byte, 232)
	binary.NativeEndian.PutUint32(info[16:], ti.Snd_mss)
	binary.NativeEndian.PutUint32(info[24:], ti.Unacked)
	binary.NativeEndian.PutUint32(info[68:], ti.Rtt)
	binary.NativeEndian.PutUint32(info[72:], ti.Rttvar)
	binary.NativeEndian.PutUint64(info[120:], ti.Bytes_acked)
	binary.NativeEndian.PutUint64(info[128:], ti.Bytes_received)
	binary.NativeEndian.PutUint32(info[148:], ti.Min_rtt)
	binary.NativeEndian.PutUint32(info[152:], ti.Data_segs_in)
	binary.NativeEndian.PutUint32(info[156:], ti.Data_segs_out)
	binary.NativeEndian.PutUint64(info[160:], ti.Delivery_rate)
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(info)))
	b = binary.NativeEndian.AppendUint16(b, inetDiagInfo)
	return append(b, info...)
}

// dumpOf turns a fixture of dumps per family into TCPRates.dump, the
// replies encoded as the kernel sends them.
func dumpOf(f func(fam uint8) ([]*netlink.InetDiagTCPInfoResp, error)) func(uint8, func([]byte)) error {
	return func(fam uint8, each func([]byte)) error {
		rs, err := f(fam)
		for _, r := range rs {
			each(encodeReply(fam, r))
		}
		return err
	}
}

// roundsDump is TCPRates.dump over a fixture of AF_INET dumps: round
// *i's replies, nothing in other families.
func roundsDump(rounds [][]*netlink.InetDiagTCPInfoResp, i *int) func(uint8, func([]byte)) error {
	return dumpOf(func(f uint8) ([]*netlink.InetDiagTCPInfoResp, error) {
		if f != syscall.AF_INET {
			return nil, nil
		}
		return rounds[*i], nil
	})
}

// loopbackTarget listens on loopback and serves the one connection it
// accepts with serve, after which the server side stays established
// until the test ends; it dials the listener, takes a TCPRates' first
// sample on its port and waits for the connection change that sample
// signals. It returns the client side and the sampler.
func loopbackTarget(t *testing.T, serve func(c net.Conn)) (net.Conn, *TCPRates) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
		<-done
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tr := NewTCPRates(uint16(l.Addr().(*net.TCPAddr).Port))
	if _, err := tr.Sample(); err != nil {
		t.Fatal(err)
	}
	<-tr.ConnChanges() // the first sample sees its connections appear
	return c, tr
}

func TestTCPRatesPerConnection(t *testing.T) {
	rounds := [][]*netlink.InetDiagTCPInfoResp{
		{resp(1, "10.0.0.3:40000", 3260, 1000, 0), resp(2, "10.0.0.2:40001", 3260, 0, 500), resp(9, "10.0.0.9:22", 22, 0, 0), resp(4, "10.0.0.4:40003", 4420, 0, 0)},
		// 10.0.0.3 wrote 1 MB; 10.0.0.2 reconnected (new cookie, counters
		// restarted): no negative rate, just a new baseline; 10.0.0.4,
		// an NVMe/TCP host on the second port, read 2 MB.
		{resp(1, "10.0.0.3:40000", 3260, 1001000, 0), resp(3, "10.0.0.2:40002", 3260, 0, 10), resp(4, "10.0.0.4:40003", 4420, 0, 2e6)},
	}
	i := 0
	now := time.Unix(0, 0)
	tr := &TCPRates{Ports: []uint16{3260, 4420}, now: func() time.Time { return now }, dump: roundsDump(rounds, &i)}
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
	if r[w].WriteBps != 1e6 || r[w].ReadBps != 0 || r[w].WriteBytes != 1e6 || r[w].ReadBytes != 0 || r[w].SRTT != 250*time.Microsecond || r[w].Seconds != 1 {
		t.Fatalf("writer %+v", r[w])
	}
	// Over a caller's 4 s (its devices' interval): the same bytes.
	o := r[w]
	if o.Over(4); o.WriteBps != 0.25e6 || o.WriteBytes != 1e6 || o.Seconds != 4 {
		t.Fatalf("writer's rates over 4 s %+v", o)
	}
	if r[rd].WriteBps != 0 || r[rd].ReadBps != 0 || r[rd].ReadBytes != 0 || r[rd].Conns != 1 {
		t.Fatalf("reconnected reader %+v", r[rd])
	}
	if _, ok := r[netip.MustParseAddr("10.0.0.9")]; ok {
		t.Fatal("another port's connection counted")
	}
	if n := r[netip.MustParseAddr("10.0.0.4")]; n.ReadBps != 2e6 {
		t.Fatalf("the second port's host %+v", n)
	}
}

// Against the real kernel: a loopback connection's bytes show up.
// It is one function because its checks are in order on one live
// loopback connection: sampled by exact lookup, compared field by field
// with a dump's parser, then closed.
func TestTCPRatesKernel(t *testing.T) {
	got := make(chan int64)
	c, tr := loopbackTarget(t, func(c net.Conn) {
		n, _ := io.CopyN(io.Discard, c, 1<<20)
		got <- n
	})
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
	// Both paths read tcp_info by offset: on the now quiet connection
	// they must see what vishvananda/netlink's parser of a dump sees,
	// field by field, and name the same socket.
	byExact, err := tr.exact(tr.known)
	if err != nil {
		t.Fatal(err)
	}
	known := tr.known[0]
	byDump, err := tr.dumpAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(byExact) != 1 || len(byDump) != 1 || len(tr.known) != 1 || tr.known[0] != known {
		t.Fatalf("exact %d, dump %d connections", len(byExact), len(byDump))
	}
	var oracle []*netlink.InetDiagTCPInfoResp
	for _, fam := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		rs, err := netlink.SocketDiagTCPInfo(fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.InetDiagMsg.ID.SourcePort == tr.Ports[0] && r.InetDiagMsg.State == tcpEstablished {
				oracle = append(oracle, r)
			}
		}
	}
	if len(oracle) != 1 || cookieOf(oracle[0].InetDiagMsg.ID.Cookie) != byDump[0].key.cookie {
		t.Fatalf("vishvananda/netlink dumped %d connections", len(oracle))
	}
	o := *oracle[0].TCPInfo
	for name, got := range map[string]netlink.TCPInfo{"exact": byExact[0].ti, "dump": byDump[0].ti} {
		if got.Snd_mss != o.Snd_mss || got.Unacked != o.Unacked || got.Rtt != o.Rtt || got.Rttvar != o.Rttvar ||
			got.Bytes_acked != o.Bytes_acked || got.Bytes_received != o.Bytes_received || got.Min_rtt != o.Min_rtt ||
			got.Delivery_rate != o.Delivery_rate || got.Bytes_received != 1<<20 {
			t.Fatalf("%s %+v\nvishvananda/netlink %+v", name, got, o)
		}
	}
	if byExact[0].key != byDump[0].key {
		t.Fatalf("exact %+v, dump %+v", byExact[0].key, byDump[0].key)
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
	tr := &TCPRates{Ports: []uint16{3260}, now: time.Now, changed: make(chan struct{}, 1), dump: roundsDump(rounds, &i)}
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
	tr := &TCPRates{Ports: []uint16{3260}, now: time.Now,
		exact: func([]diagID) ([]connSample, error) { t.Fatal("lookup without known connections"); return nil, nil },
		dump: dumpOf(func(f uint8) ([]*netlink.InetDiagTCPInfoResp, error) {
			if f == 2 {
				dumps++
			}
			return nil, nil
		})}
	for i := 0; i < 3*fullEvery; i++ {
		if _, err := tr.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	if dumps != 3 {
		t.Fatalf("%d dumps in %d samples, want 3", dumps, 3*fullEvery)
	}
}

// Commands from segments: a read command is one short segment; write
// data fills whole segments, so an 8 KiB write with immediate data counts
// the 0.31 its last segment leaves empty (under-counting writers is the
// safe side of a rule that slows by queue).
func TestCommandsFromSegments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		segs  uint32
		bytes uint64
		mss   uint32
		want  float64
	}{
		{"100 read commands", 100, 100 * 48, 1448, 100 - 4800.0/1448},
		{"10 writes of 8 KiB", 60, 10 * 8240, 1448, 60 - 82400.0/1448},
		{"no MSS yet", 5, 240, 0, 0},
		{"more bytes than segments explain", 1, 4000, 1448, 0},
		{"nothing", 0, 0, 1448, 0},
	} {
		if got := commands(tc.segs, tc.bytes, tc.mss); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v commands, want %v", tc.name, got, tc.want)
		}
	}
}

// Against the real kernel: requests answered one at a time (an iSCSI
// session at queue depth 1) are counted one command each.
func TestTCPRatesKernelCommands(t *testing.T) {
	const n = 40
	c, tr := loopbackTarget(t, func(c net.Conn) {
		req := make([]byte, 48)
		for range n {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			c.Write([]byte{1})
		}
	})
	start := time.Now()
	reply := make([]byte, 1)
	for range n {
		if _, err := c.Write(make([]byte, 48)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			t.Fatal(err)
		}
	}
	r, err := tr.Sample()
	if err != nil {
		t.Fatal(err)
	}
	got := r[netip.MustParseAddr("127.0.0.1")].CommandsPerSec * time.Since(start).Seconds()
	// The rate is per the sampler's own interval, a hair longer than
	// the loop's: allow for it and for one segment of slack.
	if got < n-1 || got > n*1.5 {
		t.Fatalf("counted %.1f commands, sent %d", got, n)
	}
}

// SendSRTT is the smallest srtt among the connections that sent more
// than one data segment since the last sample: a busy session's, not an
// idle one's (NOP-Ins) whose srtt is from before the delay.
func TestTCPRatesSendSRTT(t *testing.T) {
	conn := func(cookie uint32, peer string, segsOut, rttUs uint32) *netlink.InetDiagTCPInfoResp {
		r := resp(cookie, peer, 3260, 0, 0)
		r.TCPInfo.Data_segs_out, r.TCPInfo.Rtt = segsOut, rttUs
		return r
	}
	rounds := [][]*netlink.InetDiagTCPInfoResp{
		{conn(1, "10.0.0.3:40000", 100, 30000), conn(2, "10.0.0.3:40001", 7, 300), conn(3, "10.0.0.3:40002", 50, 60000),
			conn(4, "10.0.0.4:40000", 10, 300), conn(5, "10.0.0.5:40000", ^uint32(0)-2, 40000)},
		{conn(1, "10.0.0.3:40000", 145, 30000), conn(2, "10.0.0.3:40001", 8, 300), conn(3, "10.0.0.3:40002", 52, 60000),
			conn(4, "10.0.0.4:40000", 11, 300), conn(5, "10.0.0.5:40000", 3, 40000)},
	}
	i := 0
	now := time.Unix(0, 0)
	tr := &TCPRates{Ports: []uint16{3260}, now: func() time.Time { return now }, dump: roundsDump(rounds, &i)}
	if _, err := tr.Sample(); err != nil {
		t.Fatal(err)
	}
	i, now = 1, now.Add(100*time.Millisecond)
	r, err := tr.Sample()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		peer string
		want time.Duration
	}{
		{"10.0.0.3", 30 * time.Millisecond}, // the NOP-only session's 0.3 ms is not it
		{"10.0.0.4", 0},                     // one segment: the lone segment's longer timer
		{"10.0.0.5", 40 * time.Millisecond}, // segs_out wrapped
	} {
		if got := r[netip.MustParseAddr(c.peer)].SendSRTT; got != c.want {
			t.Errorf("%s: SendSRTT %v, want %v", c.peer, got, c.want)
		}
	}
}

// Established lists a port's connections with both ends, the peer's
// port being the client's.
func TestEstablished(t *testing.T) {
	c, tr := loopbackTarget(t, func(net.Conn) {})
	got, err := Established(tr.Ports[0])
	if err != nil {
		t.Fatal(err)
	}
	local := netip.MustParseAddrPort(c.RemoteAddr().String())
	peer := netip.MustParseAddrPort(c.LocalAddr().String())
	if len(got) != 1 || got[0].Local != local || got[0].Peer != peer {
		t.Fatalf("got %+v, want one %v ← %v", got, local, peer)
	}
}

func cookieOf(c [2]uint32) uint64 { return uint64(c[0]) | uint64(c[1])<<32 }
