package lab

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ownTgtd is the tgtd the supervisor runs for target host t: its child,
// so its pid stays its own until reaped, and the only tgtd it ever
// signals.
type ownTgtd struct {
	t        TargetHost
	mu       sync.Mutex
	pid      int
	done     chan struct{} // closed once the current tgtd is reaped
	quitting bool
}

// start starts t's tgtd in the foreground inside its namespace and
// records it, unless the supervisor is stopping.
func (o *ownTgtd) start() (chan struct{}, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.quitting {
		return nil, errQuitting
	}
	cmd := exec.Command("ip", "netns", "exec", o.t.NS, "tgtd", "-f", "-C", o.t.port(),
		"--iscsi", fmt.Sprintf("portal=%s:%d", o.t.Addr, ISCSIPort))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	o.pid, o.done = cmd.Process.Pid, done
	// ip netns exec execs tgtd in place: the pid is tgtd's.
	return done, recordProc("tgtd", cmd.Process.Pid, o.t.NS)
}

// supervise runs the tgtd and restarts it (with the lab's targets)
// whenever it exits unasked.
func (o *ownTgtd) supervise(log *slog.Logger, quit <-chan struct{}) {
	backoff := 200 * time.Millisecond
	for restart := false; ; restart = true {
		done, err := o.start()
		if err == errQuitting {
			return
		}
		if err != nil {
			log.Error("tgtd start", "err", err)
			if done == nil {
				return
			}
		}
		go func() {
			// Restore targets once a restarted daemon answers (the first
			// start is configured by Up, which creates the loop devices).
			if !restart || WaitFor("tgtd", 10*time.Second, func() bool { return tgtReadyOn(o.t) }) != nil {
				return
			}
			if s, err := LoadState(); err == nil && lunsAttached(s) {
				if err := configureTargetsOn(s, o.t, nil); err != nil {
					log.Error("restore targets", "err", err)
				}
			}
		}()
		select {
		case <-quit:
			<-done
			return
		case <-done:
			log.Warn("tgtd exited; restarting", "after", backoff)
			select {
			case <-quit:
				return
			case <-time.After(backoff):
			}
		}
	}
}

// stop ends the supervisor's own tgtd: through tgtadm when orderly and
// that tgtd is the only one on its control port (so what answers there
// is ours), then SIGTERM, then SIGKILL, by pid, each after a bounded
// wait; a tgtadm that failed or hung goes straight to the signals.
func (o *ownTgtd) stop(orderly bool, log *slog.Logger) {
	o.mu.Lock()
	o.quitting = true
	pid, done := o.pid, o.done
	o.mu.Unlock()
	if done == nil || closed(done) {
		return
	}
	wait := map[syscall.Signal]time.Duration{0: 3 * time.Second, syscall.SIGTERM: time.Second, syscall.SIGKILL: 3 * time.Second}
	sigs := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	if pids := tgtdPids(o.t); orderly && len(pids) == 1 && pids[0] == pid {
		if err := stopTgtdOrderly(o.t); err != nil {
			log.Warn("tgtadm", "err", err)
		} else {
			sigs = append([]syscall.Signal{0}, sigs...)
		}
	}
	for _, sig := range sigs {
		if sig != 0 {
			log.Info("stopping tgtd", "pid", pid, "signal", sig)
			syscall.Kill(pid, sig)
		}
		select {
		case <-done:
			if orderly {
				removeTgtdSockets(o.t)
			}
			return
		case <-time.After(wait[sig] * Slowdown()):
		}
	}
}

// kill ends the own tgtd with SIGKILL, not waiting.
func (o *ownTgtd) kill() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.quitting = true
	if o.done != nil && !closed(o.done) {
		syscall.Kill(o.pid, syscall.SIGKILL)
	}
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
