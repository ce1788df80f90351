package throttle

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestDelayLineRamp: with Ramp set, a consumer's new delay is reached
// gradually (each packet may advance it by at most Ramp × rampGap), and
// a lower setting applies at once. Each ping-pong round trip sends one
// packet toward the consumer, so at Ramp 1 the added delay climbs about
// 2 ms per round trip toward 20 ms.
func TestDelayLineRamp(t *testing.T) {
	l := newLab(t)
	var d *DelayLine
	var err error
	l.t.Do(func() { d, err = NewDelayLine(DelayLineConfig{Queue: 9, Label: "sqt-ramp", Ramp: 1}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.t.Do(func() { d.Close() }) })
	tc, cc := l.conn(t, false)
	cc.SetNoDelay(true)
	tc.SetNoDelay(true)
	base := pct(pingPong(t, tc, cc, 50), 0.5)

	l.set(t, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: 20 * time.Millisecond}})
	rtts := pingPong(t, tc, cc, 20)
	t.Logf("round trips after the step: %v", rtts)
	// Scheduling on a busy VM only ever adds to a round trip, so the
	// lowest of a few neighbouring ones follows the delay the line
	// applied. Packet i may carry at most (i+1) × 2 ms; a step (no ramp)
	// would carry the whole 20 ms from the first.
	low := func(i int) time.Duration { return slices.Min(rtts[i:i+3]) - base }
	for i := 0; i < 7; i++ {
		if due := time.Duration(i+1) * 2 * time.Millisecond; low(i) > due+4*time.Millisecond {
			t.Errorf("round trips %d-%d added at least %v, the ramp allows %v", i, i+2, low(i), due)
		}
	}
	tail := slices.Clone(rtts[len(rtts)-5:])
	slices.Sort(tail)
	if a := tail[2] - base; a < 19*time.Millisecond || a > 22*time.Millisecond {
		t.Errorf("after %d round trips the added delay is %v, want the 20 ms setting", len(rtts), a)
	}

	// A connection opened now takes the consumer's delay from its
	// SYN-ACK on: no ramp for a new login, or a throttled writer's new
	// session would reach the disk undelayed.
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
