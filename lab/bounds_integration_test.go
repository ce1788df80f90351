package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// No lab command hangs (issue 56): each finishes, or fails with a message,
// within its limit. These tests shorten the limits (LimitsEnv) so that
// giving up takes seconds, and check both the message and the time.

// slack is what a lab command may take beyond its limit to start, say
// why it gives up and exit, on a loaded 2-core machine.
const slack = 15 * time.Second

// gaveUp fails the test unless the command failed, took at least limit
// (it waited) and said want.
func gaveUp(t *testing.T, what, out string, err error, took, limit time.Duration, want string) {
	t.Helper()
	if err == nil || took < limit || !strings.Contains(out, want) {
		t.Errorf("%s: %v after %v (limit %v), want a failure saying %q:\n%s", what, err, took.Round(time.Millisecond), limit, want, out)
	}
}

// A lab command waits for another one's lab lock at most Limits.Lock,
// then fails naming the holder: up, down and run alike.
func TestLabCommandsGiveUpOnAHeldLock(t *testing.T) {
	cleanStart(t)
	bin := renamedSanqos(t)
	held, err := lockLab(Limits.Lock, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	const limit = time.Second
	env := []string{LimitsEnv + "=lock=" + limit.String()}
	want := fmt.Sprintf("another lab command holds the lab (pid %d: ", os.Getpid())
	for _, args := range [][]string{smallLab, {"lab", "down"}, {"lab", "run", "interference", "--results", t.TempDir()}} {
		out, _, took, err := runLab(t, bin, limit+slack, env, args...)
		gaveUp(t, strings.Join(args, " "), out, err, took, limit, want)
	}
	if left := Leftovers(); len(left) > 0 {
		t.Errorf("a lab command that did not get the lock made %v", left)
	}
}

// `lab up` and `lab down` stuck at a step end themselves at Limits.Up and
// Limits.Down (Watchdog), naming the step and what removes the rest; the
// next `lab down` leaves nothing.
func TestHungLabCommandsGiveUp(t *testing.T) {
	cleanStart(t)
	bin := renamedSanqos(t)
	seen := map[uint64]bool{}
	const up, down = 3 * time.Second, 2 * time.Second
	limits := fmt.Sprintf("%s=up=%v,down=%v", LimitsEnv, up, down)
	for _, c := range []struct {
		args  []string
		step  string
		limit time.Duration
	}{
		{smallLab, "up:targets", up},
		{[]string{"lab", "down"}, "down:tgtd", down},
	} {
		out, _, took, err := runLab(t, bin, c.limit+slack, []string{limits, HangAtEnv + "=" + c.step}, c.args...)
		recordedNetns(seen)
		gaveUp(t, strings.Join(c.args, " "), out, err, took, c.limit,
			fmt.Sprintf("%s %s: gave up after %v (last step reached: %q); `%s lab down` removes what it left", c.args[0], c.args[1], c.limit, c.step, bin))
	}
	mustLab(t, bin, downBound, "lab", "down")
	nothingLeft(t, bin, seen)
}

// A supervisor whose tgtadm hangs (a tgtadm on its PATH that sleeps once
// told to) kills it at Limits.Tgtadm and goes on to signal its tgtd:
// `lab down` ends in seconds, not at its supervisor's grace of 25 s, and
// leaves nothing, not even the hung tgtadm.
func TestLabDownPastAHungTgtadm(t *testing.T) {
	cleanStart(t)
	bin := renamedSanqos(t)
	env, hang := hangingTgtadm(t)
	const limit = 2 * time.Second
	env = append(env, fmt.Sprintf("%s=tgtadm=%v", LimitsEnv, limit))
	seen := map[uint64]bool{}
	if out, _, _, err := runLab(t, bin, upBound, env, smallLab...); err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	recordedNetns(seen)
	hang()
	out, _, took, err := runLab(t, bin, downBound, env, "lab", "down")
	if err != nil || !strings.Contains(out, "removed the lab's supervisor") || took > limit+5*time.Second {
		t.Errorf("lab down past a hung tgtadm: %v after %v (tgtadm's limit %v)\n%s", err, took, limit, out)
	}
	nothingLeft(t, bin, seen)
	if p := FindProcs(func(argv []string) bool { return argv[0] == hungTgtadm }); len(p) > 0 {
		t.Errorf("hung tgtadm left running: %v", p)
	}
}

// hungTgtadm is the argv[0] of hangingTgtadm's sleeping tgtadm.
const hungTgtadm = "sanqos-test-hung-tgtadm"

// hangingTgtadm puts a tgtadm first on PATH (the returned environment)
// that runs the real one until hang is called, then sleeps.
func hangingTgtadm(t *testing.T) (env []string, hang func()) {
	t.Helper()
	real, err := exec.LookPath("tgtadm")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	flag := filepath.Join(dir, "hang")
	script := fmt.Sprintf("#!/bin/bash\n[ -e %s ] && exec -a %s sleep 600\nexec %s \"$@\"\n", flag, hungTgtadm, real)
	if err := os.WriteFile(filepath.Join(dir, "tgtadm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"PATH=" + dir + ":" + os.Getenv("PATH")}, func() {
		if err := os.WriteFile(flag, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A tgtadm that hangs is killed at Limits.Tgtadm with a message, and the
// orderly stop of a tgtd gives up at its first such call (no root, no
// lab: nothing answers on the port the call names).
func TestHungTgtadmIsKilledAtItsLimit(t *testing.T) {
	env, hang := hangingTgtadm(t)
	t.Setenv("PATH", strings.TrimPrefix(env[0], "PATH="))
	hang()
	defer func(l time.Duration) { Limits.Tgtadm = l }(Limits.Tgtadm)
	Limits.Tgtadm = 300 * time.Millisecond
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"tgtadm", func() error { _, err := tgtadmOn(Target(0), "--op", "show", "--mode", "target"); return err }},
		{"orderly stop", func() error { return stopTgtdOrderly(Target(0)) }},
	} {
		t0 := time.Now()
		err := c.call()
		// A call killed at its limit may wait a second more for the
		// killed program's output (runTimeout's WaitDelay).
		if took := time.Since(t0); err == nil || !strings.Contains(err.Error(), "killed after 300ms (hung)") || took > Limits.Tgtadm+time.Second+slack/5 {
			t.Errorf("%s: %v after %v", c.name, err, took)
		}
	}
}

// A phase whose fio outlives it (here a job ten minutes long in a phase
// of one second) is ended Limits.Fio after the phase's end, and the run
// fails saying so: `lab run` is as long as its phases, not longer.
func TestRunEndsAFioThatOutlivesItsPhase(t *testing.T) {
	upLab(t)
	defer func(l time.Duration) { Limits.Fio = l }(Limits.Fio)
	Limits.Fio = time.Second
	r, err := NewRunner(context.Background(), "straggler", RunOptions{Scale: 1, Results: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := &Phase{Name: "straggler", Length: time.Second, To: time.Second,
		Jobs: []Job{{Name: "straggler", Host: "b2", URL: r.LUN("b2").URL, RW: "randread", BS: 4096, Runtime: 10 * time.Minute}}}
	t0 := time.Now()
	_, err = r.Run(p, 0)
	if took := time.Since(t0); err == nil || !strings.Contains(err.Error(), "fio still running 1s after the phase's end: killed") || took > p.Length+Limits.Fio+slack {
		t.Errorf("a phase whose fio outlives it: %v after %v", err, took)
	}
	if pids := nsPids("b2"); len(pids) > 0 {
		t.Errorf("processes left in b2: %v", pids)
	}
}
