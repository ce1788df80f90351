package throttle

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/bridgetest"
	"github.com/sanqos/sanqos/internal/testenv"
	"golang.org/x/sys/unix"
)

// nsWorker runs closures on one OS thread moved into a network namespace
// (programs it executes, such as iptables, inherit it).
type nsWorker = bridgetest.Worker

func newNsWorker(tb testing.TB, name string) *nsWorker { return bridgetest.NewWorker(tb, name) }

// lab is two throwaway namespaces joined by a veth pair: the target side
// (where the delay line runs, like the agent in target mode) and a consumer.
type lab struct {
	tns, cns string
	t, c     *nsWorker
	tAddr    netip.Addr
	cAddr    netip.Addr
	tAddr6   netip.Addr
	cAddr6   netip.Addr
}

func sh(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newLab(tb testing.TB) *lab {
	tb.Helper()
	testenv.RequireRoot(tb)
	testenv.RequireCommands(tb, "ip", "iptables", "ip6tables", "ipset")
	rb := make([]byte, 4)
	rand.Read(rb)
	id := hex.EncodeToString(rb)
	// SANQOS_TEST_NETNS_PREFIX names the namespaces and veths (at most 6
	// characters, so names fit IFNAMSIZ), e.g. "sqsim-" for the benchmark
	// script, so concurrent users of the machine can tell them apart.
	pre := "sqt"
	if p := os.Getenv("SANQOS_TEST_NETNS_PREFIX"); p != "" && len(p) <= 6 {
		pre = p
	}
	l := &lab{
		tns: pre + "T" + id, cns: pre + "C" + id,
		tAddr: netip.MustParseAddr("10.231.0.1"), cAddr: netip.MustParseAddr("10.231.0.2"),
		tAddr6: netip.MustParseAddr("fd00:231::1"), cAddr6: netip.MustParseAddr("fd00:231::2"),
	}
	for _, ns := range []string{l.tns, l.cns} {
		sh(tb, "ip", "netns", "add", ns)
		tb.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				tb.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
		sh(tb, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	sh(tb, "ip", "link", "add", pre+id+"t", "netns", l.tns, "type", "veth", "peer", "name", pre+id+"c", "netns", l.cns)
	for _, x := range []struct{ ns, dev, a4, a6 string }{
		{l.tns, pre + id + "t", l.tAddr.String(), l.tAddr6.String()},
		{l.cns, pre + id + "c", l.cAddr.String(), l.cAddr6.String()},
	} {
		sh(tb, "ip", "-n", x.ns, "addr", "add", x.a4+"/24", "dev", x.dev)
		sh(tb, "ip", "-n", x.ns, "addr", "add", x.a6+"/64", "dev", x.dev, "nodad")
		sh(tb, "ip", "-n", x.ns, "link", "set", x.dev, "up")
	}
	l.t = newNsWorker(tb, l.tns)
	l.c = newNsWorker(tb, l.cns)
	return l
}

// delayLine starts a delay line in the target namespace, closed at cleanup
// (a second Close after the test's own is a no-op).
func (l *lab) delayLine(tb testing.TB) *DelayLine {
	tb.Helper()
	return l.delayLineWith(tb, DelayLineConfig{})
}

// delayLineWith is delayLine with cfg's options (queue and label are the
// tests').
func (l *lab) delayLineWith(tb testing.TB, cfg DelayLineConfig) *DelayLine {
	tb.Helper()
	var d *DelayLine
	var err error
	cfg.Queue, cfg.Label = 7, "sqt-dl"
	l.t.Do(func() { d, err = NewDelayLine(cfg) })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		l.t.Do(func() {
			if err := d.Close(); err != nil {
				tb.Errorf("close: %v", err)
			}
		})
	})
	return d
}

func (l *lab) set(tb testing.TB, d *DelayLine, m map[netip.Addr]Setting) {
	tb.Helper()
	var err error
	l.t.Do(func() { err = d.Set(m) })
	if err != nil {
		tb.Fatal(err)
	}
}

// conn opens a TCP connection from the consumer to the target's port 3260
// and returns both ends (target side first).
func (l *lab) conn(tb testing.TB, v6 bool) (*net.TCPConn, *net.TCPConn) {
	tb.Helper()
	return l.connTo(tb, v6, 3260)
}

// connTo is conn to the target's port.
func (l *lab) connTo(tb testing.TB, v6 bool, port uint16) (*net.TCPConn, *net.TCPConn) {
	tb.Helper()
	addr := netip.AddrPortFrom(l.tAddr, port)
	if v6 {
		addr = netip.AddrPortFrom(l.tAddr6, port)
	}
	var ln *net.TCPListener
	var err error
	l.t.Do(func() { ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr)) })
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	var cc *net.TCPConn
	l.c.Do(func() { cc, err = net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(addr)) })
	if err != nil {
		tb.Fatal(err)
	}
	tc, err := ln.AcceptTCP()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close(); tc.Close() })
	return tc, cc
}

// retrans reads RetransSegs of the namespace w lives in.
func retrans(tb testing.TB, w *nsWorker) int64 {
	tb.Helper()
	var v int64 = -1
	w.Do(func() {
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return
		}
		defer f.Close()
		var hdr []string
		s := bufio.NewScanner(f)
		for s.Scan() {
			fs := strings.Fields(s.Text())
			if len(fs) == 0 || fs[0] != "Tcp:" {
				continue
			}
			if hdr == nil {
				hdr = fs
				continue
			}
			if i := slices.Index(hdr, "RetransSegs"); i > 0 {
				v, _ = strconv.ParseInt(fs[i], 10, 64)
			}
		}
	})
	if v < 0 {
		tb.Fatal("RetransSegs not found")
	}
	return v
}

func tcpRetrans(tb testing.TB, c *net.TCPConn) uint32 {
	tb.Helper()
	return tcpInfo(tb, c).Total_retrans
}

func tcpInfo(tb testing.TB, c *net.TCPConn) *unix.TCPInfo {
	tb.Helper()
	rc, _ := c.SyscallConn()
	var info *unix.TCPInfo
	var err error
	rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

// bulk sends from src to dst for dur and returns bytes/s.
func bulk(tb testing.TB, src, dst *net.TCPConn, dur time.Duration) float64 {
	tb.Helper()
	rate, _, _ := bulkTimed(tb, src, dst, dur)
	return rate
}

// bulkTimed is bulk that also returns the bytes moved and how long after
// the first write the receiver read its first byte.
func bulkTimed(tb testing.TB, src, dst *net.TCPConn, dur time.Duration) (rate float64, n int64, first time.Duration) {
	tb.Helper()
	done := make(chan int64)
	start := time.Now()
	go func() {
		b := make([]byte, 64<<10)
		n, err := dst.Read(b)
		first = time.Since(start)
		if err == nil {
			m, _ := io.Copy(io.Discard, dst)
			n += int(m)
		}
		done <- int64(n)
	}()
	buf := make([]byte, 256<<10)
	src.SetWriteDeadline(start.Add(dur))
	var sent int64
	for {
		n, err := src.Write(buf)
		sent += int64(n)
		if err != nil {
			break
		}
	}
	src.CloseWrite()
	got := <-done
	el := time.Since(start)
	if got != sent {
		tb.Fatalf("sent %d received %d", sent, got)
	}
	return float64(got) / el.Seconds(), got, first
}

// pingPong measures n request/response round trips of one byte each way.
func pingPong(tb testing.TB, tc, cc *net.TCPConn, n int) []time.Duration {
	tb.Helper()
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(tc, b); err != nil {
				return
			}
			if _, err := tc.Write(b); err != nil {
				return
			}
		}
	}()
	rtts := make([]time.Duration, n)
	b := make([]byte, 1)
	for i := range rtts {
		start := time.Now()
		if _, err := cc.Write(b); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.ReadFull(cc, b); err != nil {
			tb.Fatal(err)
		}
		rtts[i] = time.Since(start)
	}
	return rtts
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func netstatDump(tb testing.TB, w *nsWorker) map[string]int64 {
	var m map[string]int64
	w.Do(func() { m = threadNetCounters() })
	return m
}

// threadNetCounters is the calling thread's namespace's /proc/net/netstat
// and /proc/net/snmp counters, keyed "TcpExt:TCPLossProbes".
func threadNetCounters() map[string]int64 {
	m := map[string]int64{}
	for _, f := range []string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
		b, _ := os.ReadFile(f)
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			for j := 1; j < len(h) && j < len(v); j++ {
				n, _ := strconv.ParseInt(v[j], 10, 64)
				m[h[0]+h[j]] = n
			}
		}
	}
	return m
}

func netstatDiff(a, b map[string]int64) string {
	var s []string
	for k, v := range b {
		if v != a[k] && (strings.HasPrefix(k, "TcpExt") || strings.Contains(k, "Retrans")) {
			s = append(s, fmt.Sprintf("%s=%d", k, v-a[k]))
		}
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}
