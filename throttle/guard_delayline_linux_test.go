package throttle

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// waitFor polls cond until it holds or the deadline passes, and returns
// how long it took; on the deadline it fails the test with what.
func waitFor(tb testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			tb.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// guardChecks waits until g has run n more checks than it had, so a test
// can assert what a few checks did not do.
func guardChecks(tb testing.TB, g *guard, n uint64) {
	tb.Helper()
	from := g.checks.Load()
	waitFor(tb, time.Duration(n+20)*g.interval, "guard checks", func() bool { return g.checks.Load() >= from+n })
}

// An operator's `iptables -F` (and `ip6tables -F`) removes the delay
// line's rules: the guard's next check (one control tick) puts them
// back with the members the sets kept, logs it once and counts it, and
// the consumer's replies are delayed again. `ipset flush` of its set is
// repaired the same way (the members come back), counted, and not logged
// again within the minute.
func TestDelayLineReinstallsFlushedRules(t *testing.T) {
	l := newLab(t)
	h := &logRecords{}
	d := l.delayLineWith(t, DelayLineConfig{Log: slog.New(h)})
	const delay = 20 * time.Millisecond
	l.set(t, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: delay}, l.cAddr6: {ReadDelay: delay}})
	rtt := func(v6 bool) time.Duration {
		tc, cc := l.conn(t, v6)
		return pct(pingPong(t, tc, cc, 10), 0.5)
	}
	if got := rtt(false); got < delay {
		t.Fatalf("round trip %v before the flush, want ≥ %v", got, delay)
	}
	guardChecks(t, d.guard, 3)
	if got := d.Reinstalls(); got != 0 {
		t.Fatalf("%d reinstalls before anything was removed", got)
	}
	rules := func() string {
		return sh(t, "ip", "netns", "exec", l.tns, "iptables", "-S", "OUTPUT") + sh(t, "ip", "netns", "exec", l.tns, "ip6tables", "-S", "OUTPUT")
	}
	want := strings.Count(rules(), "NFQUEUE")
	sh(t, "ip", "netns", "exec", l.tns, "iptables", "-F")
	sh(t, "ip", "netns", "exec", l.tns, "ip6tables", "-F")
	if n := strings.Count(rules(), "NFQUEUE"); n != 0 {
		t.Fatalf("%d rules left after the flush", n)
	}
	took := restoredWithinOneTick(t, d, 1, "rules back after iptables -F")
	t.Logf("restored by the first whole check after the flush (check every %v; two checks took %v)", d.guard.interval, took)
	if n := strings.Count(rules(), "NFQUEUE"); n != want {
		t.Errorf("%d NFQUEUE rules after the reinstall, want %d:\n%s", n, want, rules())
	}
	for _, v6 := range []bool{false, true} {
		if got := rtt(v6); got < delay {
			t.Errorf("round trip %v after the reinstall (IPv6 %v), want ≥ %v: not delayed again", got, v6, delay)
		}
	}
	guardChecks(t, d.guard, 5)
	if got := d.Reinstalls(); got != 1 {
		t.Errorf("one flush, %d reinstalls", got)
	}
	if n := h.count(slog.LevelWarn, "reinstalled"); n != 1 {
		t.Errorf("one flush logged %d times, want once", n)
	}

	sh(t, "ip", "netns", "exec", l.tns, "ipset", "flush", "sqt-dl.q.4")
	restoredWithinOneTick(t, d, 2, "members back after ipset flush")
	if out := sh(t, "ip", "netns", "exec", l.tns, "ipset", "list", "sqt-dl.q.4"); !strings.Contains(out, l.cAddr.String()) {
		t.Errorf("consumer not back in its set:\n%s", out)
	}
	if got := rtt(false); got < delay {
		t.Errorf("round trip %v after the set's reinstall, want ≥ %v", got, delay)
	}
	if n := h.count(slog.LevelWarn, "reinstalled"); n != 1 {
		t.Errorf("a second reinstall within the minute logged: %d lines", n)
	}
}

// A delay line whose rules are all in place is left alone: no reinstall
// however many checks, and its own membership changes (set swaps) are
// never taken for a removal.
func TestDelayLineGuardQuietWhileIntact(t *testing.T) {
	l := newLab(t)
	d := l.delayLineWith(t, DelayLineConfig{Check: 10 * time.Millisecond})
	for i := range 20 {
		l.set(t, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: time.Duration(i+1) * time.Millisecond}})
		if i%2 == 0 {
			l.set(t, d, map[netip.Addr]Setting{l.cAddr: {}, l.cAddr6: {WriteDelay: time.Millisecond}})
		}
	}
	guardChecks(t, d.guard, 10)
	if got := d.Reinstalls(); got != 0 {
		t.Errorf("%d reinstalls of intact rules", got)
	}
}

// BenchmarkGuardCheck is the cost of one check of the delay line's rules
// and sets (both families, three rules each), which the guard runs every
// control tick: two netlink round trips, no iptables.
func BenchmarkGuardCheck(b *testing.B) {
	l := newLab(b)
	d := l.delayLineWith(b, DelayLineConfig{Check: -1})
	l.set(b, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: time.Millisecond}, l.cAddr6: {ReadDelay: time.Millisecond}})
	l.t.Do(func() {
		c := &checkConn{}
		defer c.close()
		b.ResetTimer()
		for range b.N {
			if err := d.cls.check(c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
