package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// runLock is held by a running experiment, so that `lab down` (or a
// rebuilding `lab up`) does not pull the lab from under it.
type runLock struct{ f *os.File }

func lockPath() string { return filepath.Join(StateDir, "run.lock") }

// acquireRunLock takes the lab's run lock without waiting.
func acquireRunLock() (*runLock, error) {
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
	f.Truncate(0)
	fmt.Fprintf(f, "pid %d: %s", os.Getpid(), strings.Join(os.Args, " "))
	return &runLock{f: f}, nil
}

func (l *runLock) release() {
	if l != nil && l.f != nil {
		l.f.Truncate(0)
		l.f.Close()
	}
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
