package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/report"
	"golang.org/x/sys/unix"
)

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestStallEpisodes(t *testing.T) {
	// Shapes from a 300 s watch on this lab's 2-vCPU machine under a
	// writers run (2026-11-28): bursts of overlapping stalls on one vCPU
	// or both, and lone short ones.
	for _, tc := range []struct {
		name   string
		stalls []Stall
		want   []Episode
	}{
		{"none", nil, nil},
		{"below the minimum", []Stall{{T: ms(1000), CPU: 0, Late: ms(5.9)}}, nil},
		{"one CPU", []Stall{{T: ms(65801), CPU: 0, Late: ms(18.9)}},
			[]Episode{{T: ms(65801), Late: ms(18.9), CPUs: []int{0}}}},
		{"both CPUs overlapping are one episode, as long as their union",
			[]Stall{{T: ms(175791), CPU: 0, Late: ms(10.4)}, {T: ms(175791.5), CPU: 1, Late: ms(12.23)}, {T: ms(175800), CPU: 0, Late: ms(11)}},
			[]Episode{{T: ms(175791), Late: ms(20), CPUs: []int{0, 1}}}},
		{"apart on the same CPU are two",
			[]Stall{{T: ms(71178), CPU: 1, Late: ms(16.39)}, {T: ms(71238), CPU: 1, Late: ms(13.38)}},
			[]Episode{{T: ms(71178), Late: ms(16.39), CPUs: []int{1}}, {T: ms(71238), Late: ms(13.38), CPUs: []int{1}}}},
		{"short stalls between long ones do not join them",
			[]Stall{{T: ms(200530), CPU: 1, Late: ms(21.85)}, {T: ms(200587), CPU: 1, Late: ms(6.89)}, {T: ms(200600), CPU: 0, Late: ms(9)}},
			[]Episode{{T: ms(200530), Late: ms(21.85), CPUs: []int{1}}, {T: ms(200600), Late: ms(9), CPUs: []int{0}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := StallEpisodes(tc.stalls, StallReportMin)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d episodes %+v, want %+v", len(got), got, tc.want)
			}
			for i, e := range got {
				w := tc.want[i]
				if e.T != w.T || (e.Late-w.Late).Abs() > time.Microsecond || !slices.Equal(e.CPUs, w.CPUs) {
					t.Errorf("episode %d: %v late %v on CPUs %v, want %v late %v on %v", i, e.T, e.Late, e.CPUs, w.T, w.Late, w.CPUs)
				}
			}
		})
	}
}

func TestWithStallsCountsEpisodesOverTheReportMinimum(t *testing.T) {
	h := withStalls(report.HostCPU{BusyPct: 12.7, StealPct: 0.4}, []Stall{
		{T: ms(100), CPU: 0, Late: ms(5)}, {T: ms(2000), CPU: 1, Late: ms(8.2)}, {T: ms(9000), CPU: 0, Late: ms(38.83)},
	})
	if h.BusyPct != 12.7 || h.StealPct != 0.4 || h.Stalls == nil || *h.Stalls != (report.HostStalls{Over8ms: 2, MaxMs: 38.8}) {
		t.Fatalf("got %+v stalls %+v, want the CPU use kept and 2 stalls, max 38.8 ms", h, h.Stalls)
	}
	if h := withStalls(report.HostCPU{}, nil); h.Stalls == nil || *h.Stalls != (report.HostStalls{}) {
		t.Fatalf("a watched phase without stalls: %+v, want a zero count (not none)", h.Stalls)
	}
}

// TestStallWatchSeesTheMachineStop runs a stall watch in a child
// process and stops the child for 40 ms (SIGSTOP, SIGCONT), as a
// hypervisor stops a vCPU: every CPU's thread must report that stall.
// (A spinning thread of higher priority in this process would not do:
// Go's scheduler preempts it every 10 ms and lets the watch run.)
func TestStallWatchSeesTheMachineStop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the stall watch needs real-time priority: run as root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStallWatchChild$")
	cmd.Env = append(os.Environ(), "SANQOS_STALL_CHILD=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "watching" {
		t.Fatalf("child: %q, want it watching", lines.Text())
	}
	const stop = 40 * time.Millisecond
	from := time.Now()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stop) // the stimulus: how long the "machine" is stopped
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(from)
	in.Close() // the child stops its watch and prints what it saw
	var child struct {
		CPUs   int
		Stalls []Stall
	}
	for lines.Scan() {
		if j, ok := strings.CutPrefix(lines.Text(), "stalls "); ok {
			if err := json.Unmarshal([]byte(j), &child); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	seen := map[int]time.Duration{}
	for _, s := range child.Stalls {
		seen[s.CPU] = max(seen[s.CPU], s.Late)
	}
	if len(seen) != child.CPUs {
		t.Errorf("stalls on %d of %d CPUs: %+v", len(seen), child.CPUs, child.Stalls)
	}
	for cpu, late := range seen {
		// A thread waits up to one period before its due time comes.
		if late < stop-StallPeriod-time.Millisecond || late > stopped+50*time.Millisecond {
			t.Errorf("CPU %d: longest stall %v, want about %v (stopped %v)", cpu, late, stop, stopped)
		}
	}
	eps := StallEpisodes(child.Stalls, StallReportMin)
	if !slices.ContainsFunc(eps, func(e Episode) bool { return len(e.CPUs) == child.CPUs && e.Late >= stop-StallPeriod-time.Millisecond }) {
		t.Errorf("episodes %+v: want one on all %d CPUs, as long as the stop", eps, child.CPUs)
	}
}

// TestStallWatchChild is TestStallWatchSeesTheMachineStop's child: it
// watches until its stdin closes, then prints the stalls as JSON.
func TestStallWatchChild(t *testing.T) {
	if os.Getenv("SANQOS_STALL_CHILD") != "1" {
		return // only as the child
	}
	w, err := StartStallWatch()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("watching")
	io.Copy(io.Discard, os.Stdin)
	stalls, err := w.Stop()
	if err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	unix.SchedGetaffinity(0, &set)
	b, _ := json.Marshal(struct {
		CPUs   int
		Stalls []Stall
	}{set.Count(), stalls})
	fmt.Printf("stalls %s\n", b)
}

// TestStallWatchGivesBackWhatItTook: the watch adds one P per watched
// CPU while it runs and takes them away on Stop, and gives its threads
// back at normal priority on every CPU; stalls.csv has a header and one
// line per stall.
func TestStallWatchGivesBackWhatItTook(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the stall watch needs real-time priority: run as root")
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(0)
	w, err := StartStallWatch()
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != procs+set.Count() {
		t.Errorf("GOMAXPROCS %d during the watch, want %d + one per watched CPU", got, procs)
	}
	if _, err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	// Each watch thread lives on (an ended thread would take the
	// children started from it with their Pdeathsig) at normal priority
	// on every CPU again.
	if len(w.tids) != set.Count() {
		t.Fatalf("%d watch threads, want one per CPU (%d)", len(w.tids), set.Count())
	}
	for _, tid := range w.tids {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
			t.Errorf("watch thread %d ended with its goroutine: %v", tid, err)
			continue
		}
		attr, err := unix.SchedGetAttr(tid, 0)
		var cpus unix.CPUSet
		if err == nil {
			err = unix.SchedGetaffinity(tid, &cpus)
		}
		if err != nil || attr.Policy != 0 /* SCHED_OTHER */ || cpus != set {
			t.Errorf("thread %d after Stop: policy %d, CPUs %v (err %v); want SCHED_OTHER on %v", tid, attr.Policy, cpus, err, set)
		}
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after Stop, want %d back", got, procs)
	}
	stalls := []Stall{{T: ms(2258.5), CPU: 0, Late: ms(11.39)}, {T: ms(13678.3), CPU: 1, Late: ms(8.31)}}
	path := filepath.Join(t.TempDir(), "stalls.csv")
	if err := writeStalls(path, stalls); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := "t_s,cpu,late_ms\n2.259,0,11.39\n13.678,1,8.31\n"; string(b) != want {
		t.Errorf("stalls.csv:\n%s\nwant\n%s", b, want)
	}
}
