package throttle

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// fakeObjects is what a guard watches in the unit tests: objects that
// are there or not, and a repair that works or fails.
type fakeObjects struct {
	present   bool
	repairErr error
	repairs   int
}

func (f *fakeObjects) guard(log *slog.Logger) *guard {
	return &guard{what: "fake", interval: time.Second, log: log,
		check: func(*checkConn) error {
			if f.present {
				return nil
			}
			return broken("rule gone")
		},
		repair: func() error {
			f.repairs++
			if f.repairErr != nil {
				return f.repairErr
			}
			f.present = true
			return nil
		}}
}

// A removal is repaired at the next check and counted; the first repair
// is logged, the ones that follow within a minute are only counted (a
// tool that keeps flushing must not flood the log), and one a minute
// later is logged again with the count of those in between. Intact
// objects cost a check and nothing else.
func TestGuardRepairsAndLogsOncePerMinute(t *testing.T) {
	h := &logRecords{}
	f := &fakeObjects{present: true}
	g := f.guard(slog.New(h))
	c := &checkConn{}
	t0 := time.Now()
	g.tick(c, t0)
	if f.repairs != 0 || g.Reinstalls() != 0 {
		t.Fatalf("intact objects repaired: %d repairs, %d reinstalls", f.repairs, g.Reinstalls())
	}
	for i := range 3 {
		f.present = false
		g.tick(c, t0.Add(time.Duration(i+1)*time.Second))
		if !f.present {
			t.Fatalf("removal %d not repaired at the next check", i+1)
		}
	}
	if got := g.Reinstalls(); got != 3 {
		t.Errorf("reinstalls %d, want 3", got)
	}
	if n := h.count(slog.LevelWarn, "reinstalled"); n != 1 {
		t.Errorf("%d reinstall log lines for 3 removals within a minute, want 1", n)
	}
	g.loggedAt = g.loggedAt.Add(-guardLogEvery) // a minute on
	f.present = false
	g.tick(c, t0.Add(time.Minute))
	if n := h.count(slog.LevelWarn, "reinstalls_since_last_log=3"); n != 1 {
		t.Errorf("the reinstall a minute later was not logged with the 2 unlogged ones before it and itself (%d lines)", n)
	}
}

// A repair that fails is logged once, not at every check, and retried
// after a growing wait rather than at every tick (each try may run
// iptables several times); the recovery is logged once.
func TestGuardFailedRepairBacksOff(t *testing.T) {
	h := &logRecords{}
	f := &fakeObjects{repairErr: errors.New("iptables: no such file")}
	g := f.guard(slog.New(h))
	g.interval = 100 * time.Millisecond
	c := &checkConn{}
	t0 := time.Now()
	g.tick(c, t0)
	if f.repairs != 1 {
		t.Fatalf("%d repairs at the first check of missing objects, want 1", f.repairs)
	}
	// Within the wait no repair runs, however many checks.
	for i := range 5 {
		g.tick(c, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if f.repairs != 1 {
		t.Errorf("%d repairs within the back-off, want 1", f.repairs)
	}
	// After it, one more; the wait then doubles.
	g.tick(c, g.retryAt.Add(time.Millisecond))
	if f.repairs != 2 || g.backoff != 200*time.Millisecond {
		t.Errorf("after the wait: %d repairs, next wait %v; want 2 and 200ms", f.repairs, g.backoff)
	}
	if n := h.count(slog.LevelError, "reinstalling failed"); n != 1 {
		t.Errorf("the same failure logged %d times, want once", n)
	}
	if g.Reinstalls() != 0 {
		t.Errorf("failed repairs counted as reinstalls: %d", g.Reinstalls())
	}
	f.repairErr = nil
	g.tick(c, g.retryAt.Add(time.Millisecond))
	if g.Reinstalls() != 1 || g.backoff != 0 {
		t.Errorf("after a repair that works: %d reinstalls, wait %v", g.Reinstalls(), g.backoff)
	}
	for range 3 {
		g.tick(c, time.Now())
	}
	if n := h.count(slog.LevelInfo, "in place again"); n != 0 {
		t.Errorf("recovery by a reinstall logged as %d in-place lines besides the reinstall", n)
	}
}

// A check that cannot tell (a netlink error) repairs nothing and logs
// once; objects found in place again after it are logged once.
func TestGuardCheckErrorRepairsNothing(t *testing.T) {
	h := &logRecords{}
	checkErr := errors.New("netlink: receive timeout")
	g := &guard{what: "fake", interval: time.Second, log: slog.New(h),
		check:  func(*checkConn) error { return checkErr },
		repair: func() error { t.Fatal("repair after a check that could not tell"); return nil }}
	c := &checkConn{}
	for range 3 {
		g.tick(c, time.Now())
	}
	if n := h.count(slog.LevelError, "receive timeout"); n != 1 {
		t.Errorf("check error logged %d times, want once", n)
	}
	checkErr = nil
	g.tick(c, time.Now())
	g.tick(c, time.Now())
	if n := h.count(slog.LevelInfo, "in place again"); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
}

// A nil guard (a backend built without one) and one never started are
// safe to end and read.
func TestGuardNilAndUnstarted(t *testing.T) {
	var g *guard
	g.end()
	if g.Reinstalls() != 0 {
		t.Error("nil guard has reinstalls")
	}
	g = startGuard(&guard{interval: -1})
	g.end()
}
