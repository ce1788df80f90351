package advise

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sanqos/sanqos/internal/testenv"
)

func TestBDP(t *testing.T) {
	for _, tc := range []struct {
		bw   float64
		rtt  time.Duration
		want uint64
	}{
		{12.5e6, 40 * time.Millisecond, 500000},   // 100 Mbit/s, 40 ms: seed 001's 512 KB point
		{12.5e6, 100 * time.Millisecond, 1250000}, // 100 ms: its 1280 KB
		{125e6, 200 * time.Microsecond, 25000},    // 1 Gbit/s LAN
		{0, time.Second, 0},
		{1e6, 0, 0},
		{3, 333333 * time.Microsecond, 1}, // rounded up
	} {
		if got := BDP(tc.bw, tc.rtt); got != tc.want {
			t.Errorf("BDP(%v, %v) = %d, want %d", tc.bw, tc.rtt, got, tc.want)
		}
	}
}

var (
	portal = netip.MustParseAddrPort("10.99.0.1:3260")
	peer   = netip.MustParseAddr("10.99.0.2")
	linux  = Limits{RmemMax: 212992, WmemMax: 212992, TCPRmem: [3]uint64{4096, 131072, 6291456}, TCPWmem: [3]uint64{4096, 16384, 4194304}}
)

func link(bw float64, rtt, rttvar time.Duration) Link {
	return Link{Peer: peer, Portal: portal, Conns: 1, SRTT: rtt, RTTVar: rttvar, Bandwidth: bw, Measured: true}
}

// Table 4.3, row by row, with seed 001's own 100 Mbit/s figures.
func TestRecommendTable43(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		l        Link
		o        Options
		row      string
		window   uint64
		nagle    bool
		wmemMax  string
		tcpWmem  string
		contains string
	}{
		{"40 ms stable: S_max_benefit = 512 KiB", link(12.5e6, 40*ms, 2*ms), Options{}, "RTT ≤ 40 ms, stable", 524288, false,
			"524288", "4096 16384 4194304", "S_max_benefit"},
		{"100 ms stable: 1280 KiB", link(12.5e6, 100*ms, 5*ms), Options{Target: "iqn.2026-11.lab:vg1"}, "RTT > 40 ms, stable", 1310720, true,
			"1310720", "4096 16384 4194304", "-T iqn.2026-11.lab:vg1 -p 10.99.0.1:3260"},
		{"LAN: never below Open-iSCSI's 512 KiB", link(125e6, ms/5, ms/50), Options{}, "RTT ≤ 40 ms, stable", 524288, false,
			"524288", "4096 16384 4194304", "512 KiB default"},
		{"fast long path raises tcp_wmem max to 2 BDP", link(125e6, 100*ms, 5*ms), Options{}, "RTT > 40 ms, stable", 12517376, true,
			"12517376", "4096 16384 25000000", "node.conn[0].tcp.window_size -v 12517376"},
		{"100 ms variable: autotuning", link(12.5e6, 100*ms, 40*ms), Options{}, "RTT > 40 ms, variable", 0, true,
			"212992", "4096 16384 4194304", "autotuning, with caution"},
		{"20 ms variable: static for the mean RTT", link(12.5e6, 20*ms, 10*ms), Options{}, "RTT ≤ 40 ms, variable", 524288, true,
			"524288", "4096 16384 4194304", "estimated mean RTT"},
		{"loopback jitter is not a variable RTT", link(125e6, 30*time.Microsecond, 15*time.Microsecond), Options{}, "RTT ≤ 40 ms, stable", 524288, false,
			"524288", "4096 16384 4194304", "default Open-iSCSI"},
		{"restricted memory: the cap", link(12.5e6, 100*ms, 5*ms), Options{MaxBuffer: 256 << 10}, "RTT > 40 ms, stable", 262144, true,
			"262144", "4096 16384 4194304", "restricted memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Recommend(tc.l, linux, tc.o)
			if r.Row != tc.row || r.WindowSize != tc.window {
				t.Fatalf("row %q window %d, want %q %d", r.Row, r.WindowSize, tc.row, tc.window)
			}
			all := r.Iscsiadm + "\n" + strings.Join(r.Notes, "\n")
			if got := strings.Contains(all, "Nagle's algorithm on"); got != tc.nagle {
				t.Errorf("Nagle note %v, want %v: %s", got, tc.nagle, all)
			}
			if !strings.Contains(all, tc.contains) {
				t.Errorf("advice lacks %q: %s", tc.contains, all)
			}
			got := map[string]string{}
			for _, s := range r.Sysctls {
				got[s.Key] = s.Value
			}
			if got["net.core.wmem_max"] != tc.wmemMax || got["net.ipv4.tcp_wmem"] != tc.tcpWmem {
				t.Errorf("sysctls %v", got)
			}
		})
	}
}

func TestSummarise(t *testing.T) {
	a := netip.MustParseAddrPort("10.99.0.2:40000")
	b := netip.MustParseAddrPort("10.99.0.2:40001")
	c := netip.MustParseAddrPort("10.99.0.3:40000")
	ls := Summarise([]Conn{
		{Portal: portal, Peer: c, SRTT: time.Millisecond, DeliveryRate: 1e6},
		{Portal: portal, Peer: a, SRTT: 2 * time.Millisecond, RTTVar: time.Millisecond, Throughput: 3e6, DeliveryRate: 4e6, SndCwnd: 10, SndMSS: 1448},
		{Portal: portal, Peer: b, SRTT: 4 * time.Millisecond, RTTVar: 3 * time.Millisecond, Throughput: 2e6, AppLimited: true},
	})
	if len(ls) != 2 || ls[0].Peer != a.Addr() {
		t.Fatalf("%+v", ls)
	}
	l := ls[0]
	// mean RTT 3 ms, worst rttvar 3 ms, bandwidth max(4e6, 3e6+2e6) = 5e6
	if l.Conns != 2 || l.SRTT != 3*time.Millisecond || l.RTTVar != 3*time.Millisecond || l.Bandwidth != 5e6 || !l.AppLimited || l.CwndBytes != 14480 {
		t.Fatalf("%+v", l)
	}
}

func TestReadLimits(t *testing.T) {
	dir := t.TempDir()
	for rel, v := range map[string]string{
		"net/core/rmem_max": "212992\n", "net/core/wmem_max": "4194304\n",
		"net/ipv4/tcp_rmem": "4096\t131072\t6291456\n", "net/ipv4/tcp_wmem": "4096\t16384\t4194304\n",
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ReadLimits(dir)
	if err != nil || l.WmemMax != 4194304 || l.TCPRmem != [3]uint64{4096, 131072, 6291456} {
		t.Fatalf("%+v %v", l, err)
	}
	if _, err := ReadLimits(t.TempDir()); err != nil {
		t.Fatalf("missing files must read as unknown: %v", err)
	}
}

// TestMeasureRealConnection measures a real loopback TCP connection
// through sock_diag: the interval is "send 4 MiB and wait until the
// server has read them", so the byte counts are known without sleeping.
func TestMeasureRealConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	read := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			read <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		read <- n
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const n = 4 << 20
	wait := func() time.Duration {
		t0 := time.Now()
		if _, err := conn.Write(make([]byte, n)); err != nil {
			t.Error(err)
		}
		return time.Since(t0)
	}
	conns, err := Measure(netlink.SocketDiagTCPInfo, port, wait)
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("sock_diag unavailable: %v", err))
	}
	conn.Close()
	if got := <-read; got != n {
		t.Fatalf("server read %d", got)
	}
	// Both ends are on the port (the server's local port, the client's
	// remote one); both name the listener as the portal.
	if len(conns) != 2 || conns[0].Portal != conns[1].Portal || conns[0].Portal.Port() != port {
		t.Fatalf("want both ends of the connection, got %+v", conns)
	}
	var bytes float64
	for _, c := range conns {
		if c.SRTT <= 0 || c.SndMSS == 0 || c.Peer.Addr() != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("implausible TCP_INFO: %+v", c)
		}
		bytes += c.Throughput
	}
	if bytes <= 0 {
		t.Fatalf("no throughput measured: %+v", conns)
	}
	ls := Summarise(conns)
	if len(ls) != 1 || ls[0].Bandwidth <= 0 {
		t.Fatalf("%+v", ls)
	}
	r := Recommend(ls[0], Limits{}, Options{})
	if r.BDP == 0 || r.WindowSize < minBuffer {
		t.Fatalf("%+v", r)
	}
}
