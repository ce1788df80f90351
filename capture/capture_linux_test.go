package capture

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/bridgetest"
)

// exchange connects the initiator to the target's port, sends req, gets
// resp back, and closes both ends.
func exchange(t *testing.T, b *bridgetest.Bridge, addr netip.AddrPort, req, resp []byte) {
	t.Helper()
	var ln *net.TCPListener
	var err error
	b.T.Do(func() { ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr)) })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		got := make([]byte, len(req))
		if _, err := io.ReadFull(c, got); err != nil {
			served <- err
			return
		}
		_, err = c.Write(resp)
		served <- err
	}()
	var c *net.TCPConn
	b.I.Do(func() { c, err = net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(addr)) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(resp))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// reassemble orders one direction's captured payloads by sequence number
// (wrap-free in a short test) and joins them, dropping retransmitted bytes.
func reassemble(segs []Segment) []byte {
	segs = slices.DeleteFunc(segs, func(s Segment) bool { return len(s.Payload) == 0 }) // SYN, ACKs, FIN
	sort.Slice(segs, func(i, k int) bool { return segs[i].Seq < segs[k].Seq })
	var out []byte
	var next uint32
	for i, s := range segs {
		if i == 0 {
			next = s.Seq
		}
		if s.Seq+uint32(len(s.Payload)) <= next {
			continue
		}
		out = append(out, s.Payload[next-s.Seq:]...)
		next = s.Seq + uint32(len(s.Payload))
	}
	return out
}

// A capture on the bridge port towards the target sees both directions of
// a connection that crosses the bridge, byte for byte and with kernel
// timestamps, and nothing of another port.
func TestCaptureOnBridgePort(t *testing.T) {
	b := bridgetest.New(t)
	for _, v6 := range []bool{false, true} {
		ta := b.TAddr
		if v6 {
			ta = b.TAddr6
		}
		var c *Capture
		var err error
		b.S.Do(func() { c, err = Open(b.TargetPort, 3260) })
		if err != nil {
			t.Fatal(err)
		}
		segs := make(chan Segment, 4096)
		ran := make(chan error, 1)
		go func() {
			ran <- c.Run(func(s Segment) {
				s.Payload = bytes.Clone(s.Payload)
				segs <- s
			})
		}()
		start := time.Now()
		req := bytes.Repeat([]byte("iscsi-request-"), 20000) // ~280 KB: many segments, GSO
		resp := bytes.Repeat([]byte("response:"), 9000)
		exchange(t, b, netip.AddrPortFrom(ta, 3261), []byte("not ours"), []byte("nor this"))
		exchange(t, b, netip.AddrPortFrom(ta, 3260), req, resp)
		// Wait for both FINs: the capture has then seen everything before.
		var toT, toI []Segment
		fins := 0
		deadline := time.After(10 * time.Second)
		for fins < 2 {
			select {
			case s := <-segs:
				if s.Src.Port() == 3261 || s.Dst.Port() == 3261 {
					t.Fatalf("v6=%v: segment of port 3261 passed the filter: %+v", v6, s)
				}
				if s.Time.Before(start.Add(-time.Second)) || s.Time.After(time.Now().Add(time.Second)) {
					t.Fatalf("timestamp %v outside the test", s.Time)
				}
				if s.Dst.Port() == 3260 {
					toT = append(toT, s)
				} else {
					toI = append(toI, s)
				}
				if s.Flags&FIN != 0 {
					fins++
				}
			case <-deadline:
				t.Fatalf("v6=%v: saw %d FINs, %d+%d segments", v6, fins, len(toT), len(toI))
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		if got := reassemble(toT); !bytes.Equal(got, req) {
			t.Errorf("v6=%v: to target: reassembled %d bytes, sent %d", v6, len(got), len(req))
		}
		if got := reassemble(toI); !bytes.Equal(got, resp) {
			t.Errorf("v6=%v: to initiator: reassembled %d bytes, sent %d", v6, len(got), len(resp))
		}
		if toT[0].Src.Addr() != map[bool]netip.Addr{false: b.IAddr, true: b.IAddr6}[v6] {
			t.Errorf("source %v", toT[0].Src)
		}
		st := c.Stats()
		t.Logf("v6=%v: %d segments to the target, %d back; stats %+v", v6, len(toT), len(toI), st)
	}
}

// within runs f and fails the test if f has not returned after d: a
// timeout guard, so a Close or Run that blocks fails with what blocked
// instead of hanging until go test's own timeout. f must not call t's
// Fatal methods (it runs on another goroutine).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s: still blocked after %v", what, d)
	}
}

// Close ends Run promptly even when no packet arrives, and a second Close
// is harmless.
func TestCloseStopsIdleRun(t *testing.T) {
	// Run wakes every 100 ms to notice Close; the rest is slack for a
	// loaded machine.
	const prompt = 2 * time.Second
	b := bridgetest.New(t)
	var c *Capture
	var err error
	b.S.Do(func() { c, err = Open(b.TargetPort, 3260) })
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(func(Segment) {}) }()
	// Close a Run that is running (idle: nothing crosses the bridge), not
	// one Close would stop before it starts.
	within(t, 10*time.Second, "Run starting", func() {
		for {
			c.mu.Lock()
			running := c.running
			c.mu.Unlock()
			if running {
				return
			}
			runtime.Gosched()
		}
	})
	start := time.Now()
	var cerr error
	within(t, prompt, "Close of an idle Run", func() { cerr = c.Close() })
	if cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	timer := time.NewTimer(prompt)
	defer timer.Stop()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-timer.C:
		t.Fatalf("Run still running %v after Close returned", prompt)
	}
	t.Logf("idle Run ended %v after Close", time.Since(start))
	within(t, prompt, "second Close", func() { cerr = c.Close() })
	if cerr != nil {
		t.Errorf("second Close: %v", cerr)
	}
	within(t, prompt, "Run after Close", func() { err = c.Run(func(Segment) {}) })
	if err != nil {
		t.Fatalf("Run after Close: %v, want nil at once", err)
	}
}

func TestOpenUnknownInterface(t *testing.T) {
	if _, err := Open("sqb-nonexistent", 3260); err == nil {
		t.Fatal("opened a capture on a missing interface")
	}
}
