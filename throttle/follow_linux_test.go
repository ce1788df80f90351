package throttle

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// stepTo20ms starts a delay line with cfg and a ping-pong connection whose
// client is the consumer, measures the undelayed round trip (base), then
// sets the consumer's read delay to 20 ms.
func stepTo20ms(t *testing.T, cfg DelayLineConfig) (l *lab, d *DelayLine, tc, cc *net.TCPConn, base time.Duration) {
	t.Helper()
	l = newLab(t)
	var err error
	l.t.Do(func() { d, err = NewDelayLine(cfg) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.t.Do(func() { d.Close() }) })
	tc, cc = l.conn(t, false)
	cc.SetNoDelay(true)
	tc.SetNoDelay(true)
	base = pct(pingPong(t, tc, cc, 50), 0.5)
	l.set(t, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: 20 * time.Millisecond}})
	return l, d, tc, cc, base
}

// checkLoginAndFall: with the consumer at a 20 ms read delay, a connection
// opened now takes it from its SYN-ACK on (no ramp for a new login, or a
// throttled writer's new session would reach the disk undelayed), and
// lowering the setting to 1 ms applies at once.
func checkLoginAndFall(t *testing.T, l *lab, d *DelayLine, tc, cc *net.TCPConn, base time.Duration) {
	t.Helper()
	start := time.Now()
	tc2, cc2 := l.conn(t, false)
	if hs := time.Since(start); hs < 19*time.Millisecond {
		t.Errorf("handshake took %v: the SYN-ACK was not delayed", hs)
	}
	cc2.SetNoDelay(true)
	tc2.SetNoDelay(true)
	if first := slices.Min(pingPong(t, tc2, cc2, 3)) - base; first < 19*time.Millisecond {
		t.Errorf("a new connection's first round trips added %v, want the 20 ms setting at once", first)
	}

	l.set(t, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: time.Millisecond}})
	if a := pct(pingPong(t, tc, cc, 5), 0.5) - base; a > 3*time.Millisecond {
		t.Errorf("after lowering to 1 ms the added delay is %v: decreases must apply at once", a)
	}
}

// TestDelayLineFollow: with Follow, a packet's delay never exceeds twice
// the sender's smoothed RTT (modelled from the delays the line applied,
// 1/16 per data segment) plus followSlack, so a step to 20 ms starts at
// about 1 ms and climbs to the setting; a new connection takes the
// setting at once, and a decrease applies at once.
func TestDelayLineFollow(t *testing.T) {
	l, d, tc, cc, base := stepTo20ms(t, DelayLineConfig{Queue: 9, Label: "sqt-follow", Follow: true})
	rtts := pingPong(t, tc, cc, 60)
	t.Logf("round trips after the step: %v", rtts)
	// Measured round trips only exceed the delays applied (scheduling
	// adds, never removes), so an srtt built from them bounds the
	// model's from above and the check cannot fail on a slow VM; the
	// lowest of three neighbours filters the same noise the other way.
	var srtt time.Duration
	for i := 0; i+3 <= len(rtts); i++ {
		low := slices.Min(rtts[i:i+3]) - base
		if bound := 2*srtt + followSlack + 4*time.Millisecond; low > bound {
			t.Errorf("round trip %d added at least %v, over 2·srtt + slack = %v", i, low, bound)
		}
		srtt += (rtts[i] - base - srtt) / 16
	}
	if first := slices.Min(rtts[:3]) - base; first > followSlack+2*time.Millisecond {
		t.Errorf("the first round trips after the step added %v: the step was not capped at %v", first, followSlack)
	}
	tail := slices.Clone(rtts[len(rtts)-5:])
	slices.Sort(tail)
	if a := tail[2] - base; a < 19*time.Millisecond || a > 22*time.Millisecond {
		t.Errorf("after %d round trips the added delay is %v, want the 20 ms setting", len(rtts), a)
	}
	checkLoginAndFall(t, l, d, tc, cc, base)
}
