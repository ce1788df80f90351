package lab

// The lab's record: what `lab up` made, written down as it makes it, so
// that `lab down` removes exactly that, whatever the binary is called and
// however the `lab up` that made it ended (issue 56). Processes are
// recorded by pid and start time, so a recycled pid is never taken for
// ours; loop devices with their backing file, namespaces with their inode,
// FUSE mounts with their device number, for the same reason.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// recordPath is the record: one line per object, appended as each is made
// (O_APPEND, so `lab up` and its supervisor write it side by side).
func recordPath() string { return filepath.Join(StateDir, "record") }

// labIDEnv carries the lab's id to its supervisor: the supervisor serves
// the lab whose record starts with that id, and no other.
const labIDEnv = "SANQOS_LAB_ID"

// Proc is a process as the record knows it: pid and start time (clock
// ticks after boot, /proc/PID/stat field 22).
type Proc struct {
	PID   int
	Start uint64
	What  string // argv, or the target namespace of a tgtd
}

// Record is the parsed record.
type Record struct {
	ID         string
	Builder    Proc
	Complete   bool
	Supervisor []Proc
	Tgtd       []Proc
	Etcd       []Proc
	Netns      map[string]uint64 // name → inode
	Loops      map[string]string // loopN → backing file
	Fuse       map[string]string // mount point → major:minor
}

// newRecord starts the record of a new lab, with this process as its
// builder, and returns its id.
func newRecord() (string, error) {
	if err := os.MkdirAll(StateDir, 0o700); err != nil {
		return "", err
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := hex.EncodeToString(b)
	self, err := procOf(os.Getpid())
	if err != nil {
		return "", err
	}
	line := fmt.Sprintf("lab %s %s\nbuilder %d %d %s\n", id, time.Now().UTC().Format(time.RFC3339), self.PID, self.Start, strings.Join(os.Args, " "))
	return id, WriteAtomic(recordPath(), []byte(line), 0o600)
}

// record appends one line to the record.
func record(kind string, fields ...any) error {
	f, err := os.OpenFile(recordPath(), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("the lab's record: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, append([]any{kind}, fields...)...)
	return err
}

// recordProc records process pid (started by us, so alive) as kind.
func recordProc(kind string, pid int, what string) error {
	p, err := procOf(pid)
	if err != nil {
		return err
	}
	return record(kind, p.PID, p.Start, what)
}

// LoadRecord reads the record; os.ErrNotExist when there is none.
func LoadRecord() (*Record, error) {
	b, err := os.ReadFile(recordPath())
	if err != nil {
		return nil, err
	}
	return parseRecord(b)
}

// parseRecord parses a record's lines; a line it cannot read (one cut
// short by a kill) is skipped.
func parseRecord(b []byte) (*Record, error) {
	r := &Record{Netns: map[string]uint64{}, Loops: map[string]string{}, Fuse: map[string]string{}}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "lab":
			if len(f) > 1 {
				r.ID = f[1]
			}
		case "complete":
			r.Complete = true
		case "builder", "supervisor", "tgtd", "etcd":
			p, ok := parseProc(f[1:])
			if !ok {
				continue
			}
			switch f[0] {
			case "builder":
				r.Builder = p
			case "supervisor":
				r.Supervisor = append(r.Supervisor, p)
			case "tgtd":
				r.Tgtd = append(r.Tgtd, p)
			case "etcd":
				r.Etcd = append(r.Etcd, p)
			}
		case "netns":
			if len(f) == 3 {
				ino, _ := strconv.ParseUint(f[2], 10, 64)
				r.Netns[f[1]] = ino
			}
		case "loop":
			if len(f) == 3 {
				r.Loops[f[1]] = f[2]
			}
		case "fuse":
			if len(f) == 3 {
				r.Fuse[f[1]] = f[2]
			}
		}
	}
	if r.ID == "" {
		return nil, fmt.Errorf("%s: no lab id", recordPath())
	}
	return r, nil
}

func parseProc(f []string) (Proc, bool) {
	if len(f) < 2 {
		return Proc{}, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	return Proc{PID: pid, Start: start, What: strings.Join(f[2:], " ")}, err1 == nil && err2 == nil
}

// owns reports whether the record names process p (same pid and start).
func (r *Record) owns(pid int) bool {
	if r == nil {
		return false
	}
	for _, list := range [][]Proc{r.Supervisor, r.Tgtd, r.Etcd} {
		for _, p := range list {
			if p.PID == pid && p.Alive() {
				return true
			}
		}
	}
	return false
}

// procOf reads pid's start time.
func procOf(pid int) (Proc, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return Proc{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Proc{}, fmt.Errorf("/proc/%d/stat: unparsable", pid)
	}
	// After ") ": state is field 3, starttime field 22.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return Proc{}, fmt.Errorf("/proc/%d/stat: unparsable", pid)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Proc{}, err
	}
	return Proc{PID: pid, Start: start}, nil
}

// Alive reports whether p still runs: the same pid with the same start
// time, and not a zombie.
func (p Proc) Alive() bool {
	q, err := procOf(p.PID)
	return err == nil && q.Start == p.Start && alive(p.PID)
}

// signal sends sig to p only if p is still the process the record names:
// through a pidfd, so the pid cannot be recycled between check and kill.
func (p Proc) signal(sig syscall.Signal) bool {
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if q, err := procOf(p.PID); err != nil || q.Start != p.Start {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// nsInode is the inode of a named namespace's nsfs file (0 if none).
func nsInode(ns string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join("/run/netns", ns), &st) != nil {
		return 0
	}
	return st.Ino
}

// mountDev is the device (major:minor) of the topmost mount at dir, from
// mountinfo ("" if nothing is mounted there). Read, not stat'ed: a stat
// would ask the FUSE server, which may be gone or stuck.
func mountDev(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	dev := ""
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			dev = f[2]
		}
	}
	return dev
}

// KillAtEnv names a step at which a lab command kills itself with
// SIGKILL: the tests' deterministic way to interrupt `lab up`, `lab run`
// and `lab down` at a known point.
const KillAtEnv = "SANQOS_LAB_KILL_AT"

// HangAtEnv names a step at which a lab command stops making progress, as
// one stuck in the kernel would: the tests' way to see Watchdog end it.
const HangAtEnv = "SANQOS_LAB_HANG_AT"

// step is the lab command's current step, for the message of a command
// that gives up (StepNow).
var step atomic.Value

// reach marks step name as reached; if KillAtEnv names it, the process
// kills itself here; if HangAtEnv does, it waits here for its Watchdog.
func reach(name string) {
	step.Store(name)
	switch name {
	case os.Getenv(KillAtEnv):
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	case os.Getenv(HangAtEnv):
		select {}
	}
}

// StepNow is the last step a lab command reached ("" before the first).
func StepNow() string {
	s, _ := step.Load().(string)
	return s
}

// Steps are the steps reach names, in order, per command: the kill
// points the tests use.
var Steps = map[string][]string{
	"up":   {"up:locked", "up:network", "up:supervisor", "up:loops", "up:targets", "up:calibrated"},
	"run":  {"run:locked", "run:phase", "run:phase-done"},
	"down": {"down:locked", "down:supervisor", "down:tgtd", "down:loops", "down:mounts"},
}

// Watchdog ends this process with a message if the lab command what runs
// longer than limit (stretched by Slowdown in a TCG guest). Every step of
// up and down is bounded; this bounds their sum, and whatever was not
// foreseen, so no lab command hangs. The returned func disarms it.
func Watchdog(what string, limit time.Duration, w io.Writer) func() {
	limit *= Slowdown()
	t := time.AfterFunc(limit, func() {
		fmt.Fprintf(w, "%s: gave up after %v (last step reached: %q); `%s lab down` removes what it left\n", what, limit, StepNow(), os.Args[0])
		os.Exit(1)
	})
	return func() { t.Stop() }
}
