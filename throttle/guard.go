package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"
)

// Kernel objects outlive the process that made them, and outlive nobody
// else's wishes: an operator's `iptables -F`, `iptables -t mangle -F` or
// `nft flush ruleset`, a firewall manager reloading its ruleset, or a
// `tc qdisc del dev eth0 root` removes a backend's rules or qdiscs and
// the throttles with them, silently: traffic flows unthrottled (fail
// open) while the agent believes every consumer's delay is in place, and
// the actuator, which applies only differences, never sends them again.
//
// So every kernel backend runs a guard: every Check interval (the
// agent's control interval, 100 ms) it asks the kernel, over netlink and
// without running a program, whether its objects are still there, and
// when they are not it puts them back with the consumers' current
// settings. The checks cost a few netlink round trips (the ipsets'
// reference and element counts, the root qdisc, the hook's filters:
// BenchmarkGuardCheck), not an iptables run each.

// Reinstaller is a backend that watches its kernel objects and reinstalls
// them when someone else removes them.
type Reinstaller interface {
	// Reinstalls is how many times it found its objects removed and put
	// them back.
	Reinstalls() uint64
}

// DefaultCheck is how often a backend checks its kernel objects when its
// config does not say (the agent's default control interval).
const DefaultCheck = 100 * time.Millisecond

// errBroken marks a check's finding that objects are missing, as opposed
// to a check that could not tell (a netlink error): only the first is
// repaired.
var errBroken = errors.New("removed by someone else")

// brokenError is a check's finding: what is missing. It is errBroken
// (errors.Is) and says only what went.
type brokenError string

func (e brokenError) Error() string        { return string(e) }
func (e brokenError) Is(target error) bool { return target == errBroken }

func broken(format string, a ...any) error { return brokenError(fmt.Sprintf(format, a...)) }

// guard checks a backend's kernel objects and repairs them.
type guard struct {
	what     string // the backend, for the log
	interval time.Duration
	log      *slog.Logger
	// check reports nil while everything is in place, an error wrapping
	// errBroken for what is missing, any other error when it cannot tell.
	// It runs on the guard's thread, in the backend's namespace, with
	// the guard's netlink sockets.
	check func(*checkConn) error
	// repair puts back everything check found missing, with the current
	// settings; on error it leaves nothing half-installed that could
	// delay a packet wrongly (fail open), and is tried again later.
	repair func() error

	stop, done chan struct{}
	reinstalls atomic.Uint64
	checks     atomic.Uint64 // how many checks ran (tests wait on it)

	// The guard goroutine's own state.
	retryAt  time.Time     // no repair before (after failed ones)
	backoff  time.Duration // the wait after the next failed repair
	lastErr  string        // the failure last logged
	loggedAt time.Time     // when the last reinstall was logged
	unlogged uint64        // reinstalls since
}

// guardRetryMax bounds the wait between repairs that keep failing, each
// of which may run iptables several times.
const guardRetryMax = 10 * time.Second

// guardLogEvery bounds the reinstall log to one line a minute: a tool
// that keeps flushing the firewall must not flood the journal.
const guardLogEvery = time.Minute

// startGuard starts g's goroutine in the caller's network namespace;
// with a negative interval it starts none (probes, which close at once).
func startGuard(g *guard) *guard {
	if g.interval < 0 {
		return g
	}
	g.interval = cmp.Or(g.interval, DefaultCheck)
	g.log = cmp.Or(g.log, slog.Default())
	g.stop, g.done = make(chan struct{}), make(chan struct{})
	enter := creatorNS()
	go func() {
		defer close(g.done)
		if err := enter(); err != nil {
			g.log.Error(g.what+": cannot watch its kernel objects", "err", err)
			return
		}
		c := &checkConn{}
		defer c.close()
		t := time.NewTicker(g.interval)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case now := <-t.C:
				g.tick(c, now)
			}
		}
	}()
	return g
}

// end stops the guard and waits for a repair in progress; a nil or
// never-started guard is fine.
func (g *guard) end() {
	if g == nil || g.stop == nil {
		return
	}
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	<-g.done
}

// Reinstalls implements Reinstaller.
func (g *guard) Reinstalls() uint64 {
	if g == nil {
		return 0
	}
	return g.reinstalls.Load()
}

// tick is one check, and a repair if it found something missing.
func (g *guard) tick(c *checkConn, now time.Time) {
	defer g.checks.Add(1)
	err := g.check(c)
	switch {
	case err == nil:
		if g.lastErr != "" {
			g.log.Info(g.what + ": kernel objects in place again")
			g.lastErr = ""
		}
		g.backoff = 0
		return
	case !errors.Is(err, errBroken):
		c.close() // a socket in a bad state is reopened next time
		g.fail(fmt.Errorf("checking its kernel objects: %w", err))
		return
	case now.Before(g.retryAt):
		return
	}
	start := time.Now()
	if rerr := g.repair(); rerr != nil {
		g.backoff = min(max(2*g.backoff, g.interval), guardRetryMax)
		g.retryAt = time.Now().Add(g.backoff)
		g.fail(fmt.Errorf("%v; reinstalling failed (traffic flows unthrottled meanwhile): %w", err, rerr))
		return
	}
	g.reinstalls.Add(1)
	g.unlogged++
	g.lastErr, g.backoff = "", 0
	if since := time.Since(g.loggedAt); g.loggedAt.IsZero() || since >= guardLogEvery {
		g.log.Warn(g.what+": kernel objects removed by someone else; reinstalled with the current throttles",
			"missing", err.Error(), "took", time.Since(start), "reinstalls_since_last_log", g.unlogged)
		g.loggedAt, g.unlogged = time.Now(), 0
	}
}

// fail logs err unless it is the failure logged last.
func (g *guard) fail(err error) {
	if err.Error() == g.lastErr {
		return
	}
	g.lastErr = err.Error()
	g.log.Error(g.what, "err", err)
}

// creatorNS captures the calling thread's network namespace and returns
// what a new goroutine runs first to work there: lock itself to its
// thread and move the thread into that namespace. The thread is never
// unlocked: it dies with the goroutine rather than go back to the pool
// in another namespace. Only a creator on a thread of its own namespace
// (the tests') needs setns: in the agent every thread is in the one
// namespace, and setns, even into the namespace a thread is in, needs
// CAP_SYS_ADMIN, which the systemd unit need not grant for this. If the
// namespace cannot be read, the goroutine stays where it is.
func creatorNS() func() error {
	ns, nsErr := netns.Get()
	return func() error {
		if nsErr != nil {
			return nil
		}
		runtime.LockOSThread()
		defer ns.Close()
		return enterNS(ns)
	}
}
