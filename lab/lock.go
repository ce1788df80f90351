package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// fileLock is a held flock: the run lock, held by a running experiment
// so that `lab down` (or a rebuilding `lab up`) does not pull the lab
// from under it, or the lab lock (lockLab).
type fileLock struct{ f *os.File }

// hold marks the locked f as this process's (its pid and command line,
// which whoever waits for it names).
func hold(f *os.File) *fileLock {
	f.Truncate(0)
	f.WriteAt([]byte(fmt.Sprintf("pid %d: %s", os.Getpid(), strings.Join(os.Args, " "))), 0)
	return &fileLock{f: f}
}

func (l *fileLock) release() {
	if l != nil && l.f != nil {
		l.f.Truncate(0)
		l.f.Close()
	}
}

func lockPath() string { return filepath.Join(StateDir, "run.lock") }

// acquireRunLock takes the lab's run lock without waiting.
func acquireRunLock() (*fileLock, error) {
	f, err := os.OpenFile(lockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lockPath())
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrRunning, strings.TrimSpace(string(holder)))
		}
		return nil, err
	}
	return hold(f), nil
}

// ErrRunning says an experiment holds the lab.
var ErrRunning = errors.New("an experiment is running on the lab")

// checkIdle fails if an experiment holds the run lock.
func checkIdle() error {
	if _, err := os.Stat(lockPath()); err != nil {
		return nil
	}
	l, err := acquireRunLock()
	if err != nil {
		return err
	}
	l.release()
	return nil
}

// labLockPath is the lab's own lock, held by `lab up` and `lab down` for
// their whole run (and briefly by `lab run` while it takes the run lock).
// It lives outside StateDir, which Down removes: a lock file that is
// removed and made anew would let two holders in.
const labLockPath = "/run/sanqos-lab.lock"

// lockLab takes the lab lock, waiting at most wait for another lab
// command to finish; a holder killed with SIGKILL frees it at once.
func lockLab(wait time.Duration, log io.Writer) (*fileLock, error) {
	f, err := os.OpenFile(labLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	said := false
	deadline := time.Now().Add(wait * Slowdown())
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		holder, _ := os.ReadFile(labLockPath)
		h := strings.TrimSpace(string(holder))
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another lab command holds the lab (%s) after %v: let it finish, or end it", h, wait*Slowdown())
		}
		if !said {
			fmt.Fprintf(log, "waiting for another lab command (%s)\n", h)
			said = true
		}
		time.Sleep(100 * time.Millisecond) // another process's lock: nothing to wait on but the lock
	}
	return hold(f), nil
}
