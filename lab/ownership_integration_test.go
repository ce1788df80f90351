package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The lab owns what it makes, whatever the binary is called (issue 56):
// these tests drive the sanqos-lab binary built as bar-lab, as a new user
// did, and check that nothing of the lab is left after each `lab down`.

// Bounds every lab command keeps (here: up ~3 s, down ~1 s, interference
// at scale 0.25 ~150 s). A command still running at its bound fails the
// test: no lab command may hang.
var (
	upBound   = 2 * time.Minute
	downBound = time.Minute
	runBound  = 6 * time.Minute
)

// renamed is sanqos-lab built as bar-lab, beside the sanqos it runs
// agents from, once for the package's tests (TestMain removes their
// directory).
var renamed struct {
	once     sync.Once
	dir, bin string
	err      error
}

// renamedSanqos builds sanqos-lab as DIR/bar-lab and sanqos as DIR/sanqos.
func renamedSanqos(t *testing.T) string {
	t.Helper()
	renamed.once.Do(func() {
		if renamed.dir, renamed.err = os.MkdirTemp("", "labown-"); renamed.err != nil {
			return
		}
		renamed.bin = filepath.Join(renamed.dir, "bar-lab")
		for _, b := range [][2]string{{renamed.bin, "../cmd/sanqos-lab"}, {filepath.Join(renamed.dir, "sanqos"), "../cmd/sanqos"}} {
			if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
				renamed.err = fmt.Errorf("building %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if renamed.err != nil {
		t.Fatal(renamed.err)
	}
	return renamed.bin
}

// runLab runs `bin args...` with env added to this process's, and says
// how it ended and how long it took. The test fails if the command is
// still running after bound: no lab command may hang.
func runLab(t *testing.T, bin string, bound time.Duration, env []string, args ...string) (string, *os.ProcessState, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(t0)
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %v: a lab command hung\n%s", strings.Join(args, " "), bound, out)
	}
	t.Logf("%s %s: %v", strings.Join(args, " "), strings.Join(env, " "), took.Round(10*time.Millisecond))
	return string(out), cmd.ProcessState, took, err
}

// labCmd is runLab; with killAt, the command kills itself with SIGKILL
// at that step (KillAtEnv) and labCmd checks it did.
func labCmd(t *testing.T, bin string, bound time.Duration, killAt string, args ...string) (string, error) {
	t.Helper()
	var env []string
	if killAt != "" {
		env = append(env, KillAtEnv+"="+killAt)
	}
	out, ps, _, err := runLab(t, bin, bound, env, args...)
	if killAt != "" {
		ws, ok := ps.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("%s never reached step %s (%v)\n%s", strings.Join(args, " "), killAt, err, out)
		}
	}
	return out, err
}

// mustLab is labCmd that must succeed.
func mustLab(t *testing.T, bin string, bound time.Duration, args ...string) string {
	t.Helper()
	out, err := labCmd(t, bin, bound, "", args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

var smallLab = []string{"lab", "up", "--lun-size", strconv.Itoa(256 << 20)}

// recordedNetns adds the record's namespace inodes to seen.
func recordedNetns(seen map[uint64]bool) {
	if r, err := LoadRecord(); err == nil {
		for _, ino := range r.Netns {
			seen[ino] = true
		}
	}
}

// nothingLeft fails the test if anything of the lab exists: Leftovers,
// a process of the renamed binary, a process in a namespace the lab made
// (seen: their inodes; a namespace lives on, nameless, while a process
// holds it), an iptables rule or ipset of the lab's agents in this
// namespace.
func nothingLeft(t *testing.T, bin string, seen map[uint64]bool) {
	t.Helper()
	var left []string
	left = append(left, Leftovers()...)
	for _, p := range procsOf(FindProcs(func(argv []string) bool { return argv[0] == bin })) {
		left = append(left, fmt.Sprintf("process %d (%s)", p.PID, p.What))
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var st syscall.Stat_t
		if _, err := strconv.Atoi(e.Name()); err == nil && syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && seen[st.Ino] {
			left = append(left, "process "+e.Name()+" in a namespace of the lab")
		}
	}
	for _, c := range [][]string{{"iptables-save"}, {"ipset", "list", "-n"}} {
		out, err := Exec(c[0], c[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "sanqos-lab") {
				left = append(left, c[0]+": "+l)
			}
		}
	}
	if len(left) > 0 {
		t.Fatalf("left behind: %s", strings.Join(left, "; "))
	}
}

// cleanStart fails unless the machine has no lab on it.
func cleanStart(t *testing.T) {
	t.Helper()
	requireLab(t)
	if left := Leftovers(); len(left) > 0 {
		t.Fatalf("lab objects exist before the test (run `sanqos-lab lab down`): %v", left)
	}
}

// Up and down three times with the binary called bar-lab: its
// supervisor is found and stopped, and nothing is left.
func TestLabUpDownUnderAnotherName(t *testing.T) {
	cleanStart(t)
	bin := renamedSanqos(t)
	seen := map[uint64]bool{}
	for i := range 3 {
		mustLab(t, bin, upBound, smallLab...)
		recordedNetns(seen)
		sup := supervisors()
		if len(sup) != 1 || !strings.HasPrefix(sup[0].What, bin+" lab serve") {
			t.Fatalf("round %d: supervisors %+v, want one %s lab serve", i, sup, bin)
		}
		out := mustLab(t, bin, downBound, "lab", "down")
		if !strings.Contains(out, fmt.Sprintf("removed the lab's supervisor pid %d", sup[0].PID)) || strings.Contains(out, "leftovers") {
			t.Errorf("round %d: lab down said %q", i, out)
		}
		nothingLeft(t, bin, seen)
	}
}

// A live lab that no record owns (here a tgtd on the lab's control port)
// makes lab up refuse, saying how to remove it; lab down removes it.
func TestLabUpRefusesALabItDoesNotOwn(t *testing.T) {
	cleanStart(t)
	bin := renamedSanqos(t)
	foreign := exec.Command("tgtd", "-f", "-C", strconv.Itoa(TgtdPort), "--iscsi", "portal=127.0.0.1:13260")
	if err := foreign.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- foreign.Wait() }()
	t.Cleanup(func() { foreign.Process.Kill() })
	if err := WaitFor("the foreign tgtd", 10*time.Second, func() bool { return len(tgtdPids(Target(0))) > 0 }); err != nil {
		t.Fatal(err)
	}
	out, err := labCmd(t, bin, upBound, "", smallLab...)
	if err == nil || !strings.Contains(out, "lab down") || !strings.Contains(out, fmt.Sprintf("tgtd pid %d", foreign.Process.Pid)) {
		t.Fatalf("lab up over a foreign tgtd: %v\n%s", err, out)
	}
	if len(Leftovers()) != 1 {
		t.Fatalf("a refused lab up made something: %v", Leftovers())
	}
	out = mustLab(t, bin, downBound, "lab", "down")
	if !strings.Contains(out, fmt.Sprintf("removed leftovers no live lab owned: tgtd pid %d", foreign.Process.Pid)) {
		t.Errorf("lab down said %q", out)
	}
	<-exited
	nothingLeft(t, bin, map[uint64]bool{})
}

// A supervisor whose lab's record is gone stops only what is its own:
// its tgtd by pid, not another tgtd on the lab's control ports (the stale
// supervisors of issue 56 deleted the current lab's tgtd), not the lab's
// loop devices. With a SIGTERM or none (it watches the record), it exits.
func TestStaleSupervisorTouchesOnlyItsOwn(t *testing.T) {
	cleanStart(t)
	bin := renamedSanqos(t)
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM} {
		seen := map[uint64]bool{}
		mustLab(t, bin, upBound, smallLab...)
		recordedNetns(seen)
		rec, err := LoadRecord()
		if err != nil || len(rec.Supervisor) != 1 || len(rec.Tgtd) != 1 {
			t.Fatalf("record %+v, %v", rec, err)
		}
		sup, tgtd := rec.Supervisor[0], rec.Tgtd[0]
		// The record goes while the supervisor cannot see it go; another
		// tgtd (bm2's control port) stands for another lab's.
		syscall.Kill(sup.PID, syscall.SIGSTOP)
		if err := os.Rename(recordPath(), recordPath()+".away"); err != nil {
			t.Fatal(err)
		}
		other := exec.Command("tgtd", "-f", "-C", strconv.Itoa(Target(1).CtlPort), "--iscsi", "portal=127.0.0.1:13261")
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- other.Wait() }()
		if sig != 0 {
			syscall.Kill(sup.PID, sig)
		}
		syscall.Kill(sup.PID, syscall.SIGCONT)
		if err := WaitFor("the stale supervisor's exit", 30*time.Second, func() bool { return !sup.Alive() }); err != nil {
			t.Fatal(err)
		}
		if tgtd.Alive() {
			t.Errorf("signal %v: the stale supervisor left its own tgtd running", sig)
		}
		select {
		case err := <-exited:
			t.Errorf("signal %v: the stale supervisor ended another tgtd: %v", sig, err)
		default:
		}
		if len(rec.ownedLoops()) != 4 {
			t.Errorf("signal %v: the stale supervisor detached the lab's loop devices: %v left", sig, rec.ownedLoops())
		}
		if err := os.Rename(recordPath()+".away", recordPath()); err != nil {
			t.Fatal(err)
		}
		out := mustLab(t, bin, downBound, "lab", "down")
		if !strings.Contains(out, fmt.Sprintf("tgtd pid %d", other.Process.Pid)) {
			t.Errorf("lab down said %q", out)
		}
		if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("the other tgtd: %v", err)
		}
		nothingLeft(t, bin, seen)
	}
}

// killCases are the steps TestLabKilledMidway kills lab commands at:
// every step of lab.Steps. By default the killed and the last run are of
// interference at scale 0.02 (its four phases in ~12 s), and the new lab
// after a kill is the next kill's where it needs one (~90 s in all);
// SANQOS_LAB_KILLS=all runs each kill's whole sequence, with the run at
// scale 0.25 after each (14 runs of ~2.5 minutes).
func killCases() (cases [][2]string, all bool, scale string) {
	for _, c := range []string{"up", "run", "down"} {
		for _, s := range Steps[c] {
			cases = append(cases, [2]string{c, s})
		}
	}
	if os.Getenv("SANQOS_LAB_KILLS") == "all" {
		return cases, true, "0.25"
	}
	return cases, false, "0.02"
}

// SIGKILL of lab up, lab run and lab down at named steps: after each,
// lab down leaves nothing behind, and a new lab up (+ lab run interference)
// + lab down succeeds, every command within its bound.
func TestLabKilledMidway(t *testing.T) {
	cleanStart(t)
	bin := renamedSanqos(t)
	cases, all, scale := killCases()
	run := []string{"lab", "run", "interference", "--scale", scale, "--results", t.TempDir()}
	up := false // a lab is up, built after the last kill
	for i, c := range cases {
		seen := map[uint64]bool{}
		if c[0] != "up" && !up {
			mustLab(t, bin, upBound, smallLab...)
		}
		recordedNetns(seen)
		switch c[0] {
		case "up":
			labCmd(t, bin, upBound, c[1], smallLab...)
		case "run":
			labCmd(t, bin, runBound, c[1], run...)
		case "down":
			labCmd(t, bin, downBound, c[1], "lab", "down")
		}
		recordedNetns(seen)
		out := mustLab(t, bin, downBound, "lab", "down")
		t.Logf("after %s: %s", c[1], strings.TrimSpace(out))
		nothingLeft(t, bin, seen)
		mustLab(t, bin, upBound, smallLab...)
		recordedNetns(seen)
		last := i == len(cases)-1
		if all || last {
			mustLab(t, bin, runBound, run...)
		}
		// The next kill of run or down may take this lab as its own.
		if up = !all && !last && cases[i+1][0] != "up"; !up {
			mustLab(t, bin, downBound, "lab", "down")
			nothingLeft(t, bin, seen)
		}
	}
}

// The kill points are steps the code marks, each once, and the code
// marks no other.
func TestStepsAreTheMarkedOnes(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	marked := map[string]int{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`reach\("([^"]+)"\)`).FindAllStringSubmatch(string(b), -1) {
			marked[m[1]]++
		}
	}
	n := 0
	for c, steps := range Steps {
		for _, s := range steps {
			n++
			if marked[s] != 1 || !strings.HasPrefix(s, c+":") {
				t.Errorf("step %q of %s: marked %d times", s, c, marked[s])
			}
		}
	}
	if n != len(marked) {
		t.Errorf("the code marks %d steps, Steps lists %d: %v", len(marked), n, marked)
	}
}
