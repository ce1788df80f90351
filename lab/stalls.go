package lab

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sanqos/sanqos/report"
	"golang.org/x/sys/unix"
)

// A stall watch measures how late the machine runs a thread that asks to
// run: one thread per CPU, pinned to it at real-time priority, waking
// every StallPeriod on a timerfd. A wake-up many ms late at that priority
// means the CPU ran nothing of ours at all; late on every CPU at once, the
// machine itself did not run (a hypervisor descheduled its vCPUs). On
// resume the kernel fires the TCP timers that fell due during the stall
// before any process runs, so a sender whose segment was still held in
// the delay line (a userspace process) sends a tail-loss probe the
// receiver then DSACKs: lab noise of the machine, not the code under
// test, which a phase's loss probes are judged beside (docs/interferers.md).

// StallPeriod is how often the watch's threads wake: short enough to
// time a stall to a few ms, long enough to cost little CPU (two wake-ups
// per ms on a 2-CPU machine cost ~1 % of one).
const StallPeriod = 2 * time.Millisecond

// StallMin is the least lateness recorded as a stall. Wake-ups of a
// real-time thread on an idle-enough machine are tens of µs late; 4 ms is
// well past scheduling and below the 8 ms that matters to a loss-probe
// timer of a delayed flow (2·srtt + 2 ms against srtt ≈ delay).
const StallMin = 4 * time.Millisecond

// stallPriority is the watch threads' SCHED_FIFO priority: above every
// ordinary process (the agent, tgtd, fio), below the kernel's own
// real-time threads (threaded interrupts at 50).
const stallPriority = 10

// Stall is one late wake-up: at T after the watch started, on CPU, Late
// after it was due.
type Stall struct {
	T    time.Duration
	CPU  int
	Late time.Duration
}

// StallWatch runs the watch threads until Stop.
type StallWatch struct {
	t0     int64 // CLOCK_MONOTONIC ns at start
	procs  int   // GOMAXPROCS before the watch
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	stalls []Stall
	errs   []error
	tids   []int // the watch threads, for the tests
}

// StartStallWatch starts one watch thread per CPU the process may run on.
// Without the right to real-time priority (not root, or a container
// without CAP_SYS_NICE) it fails: a watch at normal priority would
// measure the load, not the machine.
func StartStallWatch() (*StallWatch, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("stall watch: %w", err)
	}
	w := &StallWatch{t0: monoNow(), stop: make(chan struct{}), procs: runtime.GOMAXPROCS(0)}
	// A watch thread leaving its read needs a P to run on; one per thread
	// on top of the process's own, so a busy runner never makes a wake-up
	// look late. Given back on Stop.
	runtime.GOMAXPROCS(w.procs + set.Count())
	ready := make(chan error)
	n := 0
	for cpu := 0; cpu < 1024 && n < set.Count(); cpu++ {
		if !set.IsSet(cpu) {
			continue
		}
		n++
		w.wg.Add(1)
		go w.watch(cpu, ready)
	}
	var errs []error
	for range n {
		if err := <-ready; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		w.Stop()
		return nil, fmt.Errorf("stall watch: %w", errs[0])
	}
	return w, nil
}

// watch is one CPU's thread. It gives the thread back as it found it
// (policy, priority, CPUs) before unlocking it. Ending the goroutine
// locked would make the runtime end the thread instead, and a child
// started from that thread earlier (the lab's agents, fio: exec with
// Pdeathsig) gets its parent-death signal when its parent *thread*
// exits: the lab's agents died when a phase ended.
func (w *StallWatch) watch(cpu int, ready chan<- error) {
	defer w.wg.Done()
	runtime.LockOSThread()
	orig, err := saveThread()
	if err != nil {
		runtime.UnlockOSThread() // nothing changed yet
		ready <- err
		return
	}
	defer orig.restore()
	w.mu.Lock()
	w.tids = append(w.tids, unix.Gettid())
	w.mu.Unlock()
	fd, err := setupWatchThread(cpu)
	due := monoNow() + int64(StallPeriod)
	if err == nil {
		err = armAt(fd, due)
	}
	// Ready once the first wake-up is armed: from then on a stall shows.
	ready <- err
	if fd >= 0 {
		defer unix.Close(fd)
	}
	if err != nil {
		return
	}
	var buf [8]byte
	for {
		if _, err := unix.Read(fd, buf[:]); err != nil && err != unix.EINTR {
			w.fail(err)
			return
		}
		if late := time.Duration(monoNow() - due); late >= StallMin {
			w.mu.Lock()
			w.stalls = append(w.stalls, Stall{T: time.Duration(due - w.t0), CPU: cpu, Late: late})
			w.mu.Unlock()
		}
		select {
		case <-w.stop:
			return
		default:
		}
		due = monoNow() + int64(StallPeriod)
		if err := armAt(fd, due); err != nil {
			w.fail(err)
			return
		}
	}
}

// armAt sets the timerfd fd to expire at due (CLOCK_MONOTONIC ns).
func armAt(fd int, due int64) error {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(due)}
	return unix.TimerfdSettime(fd, unix.TFD_TIMER_ABSTIME, &its, nil)
}

// threadState is a thread's scheduling as found, to give it back.
type threadState struct {
	attr *unix.SchedAttr
	cpus unix.CPUSet
}

func saveThread() (threadState, error) {
	var t threadState
	var err error
	if t.attr, err = unix.SchedGetAttr(0, 0); err != nil {
		return t, fmt.Errorf("sched_getattr: %w", err)
	}
	if err = unix.SchedGetaffinity(0, &t.cpus); err != nil {
		return t, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return t, nil
}

// restore puts the calling (locked) thread's scheduling back and unlocks
// it; if that fails the thread stays locked and ends with its goroutine,
// rather than run other goroutines pinned at real-time priority.
func (t threadState) restore() {
	t.attr.Size = unix.SizeofSchedAttr
	if unix.SchedSetAttr(0, t.attr, 0) == nil && unix.SchedSetaffinity(0, &t.cpus) == nil {
		runtime.UnlockOSThread()
	}
}

// setupWatchThread pins the calling thread to cpu at real-time priority
// and returns a blocking timerfd for it.
func setupWatchThread(cpu int) (int, error) {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return -1, fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: stallPriority}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return -1, fmt.Errorf("SCHED_FIFO on CPU %d: %w", cpu, err)
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("timerfd: %w", err)
	}
	return fd, nil
}

func (w *StallWatch) fail(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

// Stop ends the threads (each within one StallPeriod) and returns the
// stalls in time order, and the first error a thread met, if any.
// A second call returns the same.
func (w *StallWatch) Stop() ([]Stall, error) {
	w.once.Do(func() {
		close(w.stop)
		w.wg.Wait()
		runtime.GOMAXPROCS(w.procs)
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	s := slices.Clone(w.stalls)
	slices.SortFunc(s, func(a, b Stall) int { return int(a.T - b.T) })
	var err error
	if len(w.errs) > 0 {
		err = fmt.Errorf("stall watch: %w", w.errs[0])
	}
	return s, err
}

// StallReportMin is the least stall the summaries count: a loss-probe
// timer of a flow the agent delays runs 2·srtt + 2 ms with srtt at least
// the delay, so a stall shorter than this cannot outrun one by itself.
const StallReportMin = 8 * time.Millisecond

// withStalls adds the phase's stall episodes of at least StallReportMin
// to its CPU use.
func withStalls(h report.HostCPU, stalls []Stall) report.HostCPU {
	st := &report.HostStalls{}
	for _, e := range StallEpisodes(stalls, StallReportMin) {
		st.Over8ms++
		st.MaxMs = max(st.MaxMs, report.Round(float64(e.Late)/1e6, 1))
	}
	h.Stalls = st
	return h
}

// writeStalls writes a phase's stalls (every one of at least StallMin)
// to path as CSV: when each was due (s after the phase started), on
// which CPU, how late (ms).
func writeStalls(path string, stalls []Stall) error {
	var b strings.Builder
	b.WriteString("t_s,cpu,late_ms\n")
	for _, s := range stalls {
		fmt.Fprintf(&b, "%.3f,%d,%.2f\n", s.T.Seconds(), s.CPU, float64(s.Late)/1e6)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// StallEpisodes merges the stalls of at least min into episodes: stalls
// whose late intervals overlap, on one CPU or several, are one episode,
// timed from its first stall until the last of them ends, with CPUs the
// CPUs it held. On this lab's machines (vCPUs of a shared host)
// most episodes hold one vCPU: the hypervisor ran something else on it
// (steal), and whatever ran there (the delay line, an initiator's ACK)
// waited, while the other vCPU went on firing the target's TCP timers.
func StallEpisodes(stalls []Stall, min time.Duration) []Episode {
	var out []Episode
	for _, s := range stalls {
		if s.Late < min {
			continue
		}
		if n := len(out); n > 0 && s.T <= out[n-1].T+out[n-1].Late {
			e := &out[n-1]
			e.Late = max(e.Late, s.T+s.Late-e.T)
			if !slices.Contains(e.CPUs, s.CPU) {
				e.CPUs = append(e.CPUs, s.CPU)
			}
			continue
		}
		out = append(out, Episode{T: s.T, Late: s.Late, CPUs: []int{s.CPU}})
	}
	return out
}

// Episode is one stretch of overlapping stalls (StallEpisodes).
type Episode struct {
	T, Late time.Duration
	CPUs    []int
}
