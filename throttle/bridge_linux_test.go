package throttle

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/bridgetest"
)

// Bridge mode: a delay line on FORWARD in the switch namespace holds the
// target's segments to a consumer that cross a Linux bridge (br_netfilter
// hands bridged IPv4/IPv6 to iptables' FORWARD chain, and NFQUEUE works
// there), releases them when cleared, and leaves nothing behind on Close.
func TestDelayLineOnBridgeForward(t *testing.T) {
	b := bridgetest.New(t)
	for _, k := range []string{"iptables", "ip6tables"} {
		out := bridgetest.Sh(t, "ip", "netns", "exec", b.SNS, "sysctl", "-n", "net.bridge.bridge-nf-call-"+k)
		if strings.TrimSpace(out) != "1" {
			t.Fatalf("net.bridge.bridge-nf-call-%s = %s in a new namespace: bridged packets would bypass FORWARD", k, out)
		}
	}
	var d *DelayLine
	var err error
	b.S.Do(func() { d, err = NewDelayLine(DelayLineConfig{Queue: 9, Chain: "FORWARD", Label: "sqb-dl"}) })
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			b.S.Do(func() { d.Close() })
		}
	})
	const delay = 15 * time.Millisecond
	for _, v6 := range []bool{false, true} {
		ta, ia := b.TAddr, b.IAddr
		if v6 {
			ta, ia = b.TAddr6, b.IAddr6
		}
		rtt := echoRTTs(t, b, netip.AddrPortFrom(ta, 3260), 20)
		set := func(s Setting) {
			var err error
			b.S.Do(func() { err = d.Set(map[netip.Addr]Setting{ia: s}) })
			if err != nil {
				t.Fatal(err)
			}
		}
		before := pct(rtt(), 0.5)
		set(Setting{ReadDelay: delay})
		during := pct(rtt(), 0.5)
		set(Setting{})
		after := pct(rtt(), 0.5)
		t.Logf("v6=%v: median RTT %v without, %v with a %v read delay, %v cleared", v6, before, during, delay, after)
		if during < delay || during > before+delay+10*time.Millisecond {
			t.Errorf("v6=%v: median RTT %v with a %v read delay on FORWARD (%v without)", v6, during, delay, before)
		}
		if after > before+5*time.Millisecond {
			t.Errorf("v6=%v: median RTT %v after clearing (%v before)", v6, after, before)
		}
	}
	if c := d.Counters()[b.IAddr]; c.Packets == 0 {
		t.Errorf("no packet counted as delayed for %v: %+v", b.IAddr, d.Counters())
	}
	b.S.Do(func() { err = d.Close() })
	closed = true
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"iptables", "-S"}, {"ip6tables", "-S"}, {"ipset", "list", "-n"}} {
		out := bridgetest.Sh(t, append([]string{"ip", "netns", "exec", b.SNS}, cmd...)...)
		if strings.Contains(out, "sqb-dl") || strings.Contains(out, "NFQUEUE") {
			t.Errorf("%v after Close:\n%s", cmd, out)
		}
	}
}

// echoRTTs starts a one-byte echo server on the target and returns a
// function measuring n round trips from the initiator across the bridge.
func echoRTTs(t *testing.T, b *bridgetest.Bridge, addr netip.AddrPort, n int) func() []time.Duration {
	t.Helper()
	var ln *net.TCPListener
	var err error
	b.T.Do(func() { ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var c net.Conn
	b.I.Do(func() { c, err = net.Dial("tcp", addr.String()) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func() []time.Duration {
		out := make([]time.Duration, n)
		buf := []byte{1}
		for i := range out {
			start := time.Now()
			if _, err := c.Write(buf); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatal(err)
			}
			out[i] = time.Since(start)
		}
		return out
	}
}
