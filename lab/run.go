package lab

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/lab/diskmodel"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
)

// RunOptions control a run on the lab: its length, repeats and where its
// results go. What an experiment itself takes (thresholds, writers,
// backends ...) is the experiments package's.
type RunOptions struct {
	Scale    float64   // multiplies every duration of the plan (1 = thesis length)
	Repeat   int       // repeats of each phase, for run-to-run spread
	Results  string    // results root (results/)
	RunID    string    // defaults to a UTC timestamp
	Resource string    // resource to load (default: the first)
	Progress io.Writer // progress bar / lines (nil: quiet)
	// NoStallWatch runs every phase without the stall watch
	// (stalls.go), to measure what its threads cost the run.
	NoStallWatch bool
}

// Event is a timed action inside a phase (e.g. set a throttle at 30 s).
type Event struct {
	At   time.Duration
	Name string
	Do   func() error
}

// Phase is one unit of load: fio jobs started together, sampled together.
type Phase struct {
	Name   string
	Label  string            // legend text
	Params map[string]string // recorded in the trace (e.g. writers=12)
	Jobs   []Job
	Events []Event
	Length time.Duration // wall time to sample (jobs end by then)
	// Window is the analysis window inside the phase (e.g. while writers run).
	From, To time.Duration
}

// Tick is one 100 ms sample of every LUN device of the resource, by host.
type Tick = report.Tick

// PhaseResult is what a phase recorded.
type PhaseResult struct {
	Phase  *Phase
	Repeat int
	Ticks  []Tick
	TCP    TCPCounters // on target + initiators during the phase
	// TCPByNS is TCP split by namespace (target and each initiator host).
	TCPByNS map[string]TCPCounters
	// Host is the machine's CPU use over the phase (zero if unreadable),
	// with its stalls if they were watched.
	Host report.HostCPU
	// Stalls are the phase's late wake-ups of the stall watch (T after
	// the phase started), if StallsWatched (stalls.go).
	Stalls []Stall
	// TCPSeries are the TCP counters of the target's and each fio
	// host's namespace, read every second (tcp_series.go).
	TCPSeries map[string][]TCPSample
	// Reader is the protected reader's reads as the initiator saw them
	// (a job with Job.Reader; reader.go), in time order.
	Reader []ReaderIO
	// Start is when the phase started (its ticks' T are seconds after),
	// and Queue its resource's modelled queue over the phase (nil: the
	// supervisor logs none, a real disk or an older lab).
	Start  time.Time
	Queue  *report.Backlog
	FioErr error
}

// StallsWatched says whether a stall watch ran through the phase: its
// count is then in Host, zero or not.
func (r *PhaseResult) StallsWatched() bool { return r.Host.Stalls != nil }

// Window returns the ticks inside the phase's analysis window.
func (r *PhaseResult) Window() []Tick { return r.Between(r.Phase.From, r.Phase.To) }

// Between returns the ticks whose interval ended in (from, to] after the
// phase started.
func (r *PhaseResult) Between(from, to time.Duration) []Tick {
	return report.Between(r.Ticks, from, to)
}

// Series returns f(host interval) over the phase's ticks.
func (r *PhaseResult) Series(host string, f func(sample.Interval) float64) (x, y []float64) {
	return report.HostSeries(r.Ticks, host, f)
}

// Runner executes phases on a built lab.
type Runner struct {
	State    *State
	Res      *Resource
	Dir      string
	opts     RunOptions
	trace    *csv.Writer
	traceF   *os.File
	progress *progress
	lock     *fileLock
	// ctx ends the run: Run stops its phase's fio and returns ctx.Err().
	// A Runner is one run, so it carries the run's context, as an
	// http.Request does, for every phase an experiment starts.
	ctx context.Context
	// TracePrefix tags trace.csv's phase names, so the runs of one
	// invocation stay apart in one trace (one run per backend: "edt/").
	TracePrefix string
}

// NewRunner prepares results/<name>/<run-id>/ for a run that ctx ends.
func NewRunner(ctx context.Context, name string, o RunOptions) (*Runner, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	// Not while a lab up or down is under way: the lab lock, held until
	// the run lock is.
	ll, err := lockLab(Limits.Lock, progressOrDiscard(o.Progress))
	if err != nil {
		return nil, err
	}
	defer ll.release()
	s, err := LoadState()
	if err != nil {
		return nil, fmt.Errorf("lab is not up (run `sanqos-lab lab up`): %w", err)
	}
	if p := s.Health(); len(p) > 0 {
		return nil, fmt.Errorf("lab unhealthy (%s): run `sanqos-lab lab up`", strings.Join(p, "; "))
	}
	res := &s.Resources[0]
	if o.Resource != "" {
		if res, err = s.Resource(o.Resource); err != nil {
			return nil, err
		}
	}
	lock, err := acquireRunLock()
	if err != nil {
		return nil, err
	}
	reach("run:locked")
	// With the run lock held, anything still running in an initiator
	// namespace is load left by an interrupted run, which would skew
	// this one: end it.
	for _, h := range Hosts {
		if pids := nsPids(h); len(pids) > 0 {
			fmt.Fprintf(progressOrDiscard(o.Progress), "ending %d processes left in %s by an earlier run\n", len(pids), h)
			KillAll(pids)
		}
	}
	o.RunID = cmp.Or(o.RunID, time.Now().UTC().Format("20060102-150405"))
	dir := filepath.Join(o.Results, name, o.RunID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "trace.csv"))
	if err != nil {
		return nil, err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"phase", "repeat", "t_s", "host", "device", "reads", "writes", "r_await_ms", "w_await_ms", "read_mb_s", "write_mb_s", "inflight"})
	LinkLatest(o.Results, name, o.RunID)
	return &Runner{State: s, Res: res, Dir: dir, opts: o, trace: w, traceF: f, progress: newProgress(o.Progress), lock: lock, ctx: ctx}, nil
}

// LinkLatest points results/name/latest at run id.
func LinkLatest(results, name, id string) {
	latest := filepath.Join(results, name, "latest")
	os.Remove(latest)
	os.Symlink(id, latest)
}

// PlanRunner is a Runner on resource res of s that runs nothing and
// writes nothing: enough to build an experiment's phases and job files,
// or to summarize a recorded run, without a lab.
func PlanRunner(s *State, res *Resource, o RunOptions) *Runner {
	return &Runner{State: s, Res: res, opts: o, ctx: context.Background()}
}

// Context is the run's: done once the run is cancelled.
func (r *Runner) Context() context.Context { return r.ctx }

func progressOrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Close flushes the trace and releases the lab.
func (r *Runner) Close() error {
	defer r.lock.release()
	r.trace.Flush()
	return r.traceF.Close()
}

// Scale applies the run's time scale.
func (r *Runner) Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * r.opts.Scale).Round(time.Millisecond)
}

// LUN returns a host's LUN on the run's resource.
func (r *Runner) LUN(host string) *LUN {
	l, err := r.Res.LUNOf(host)
	if err != nil {
		panic(err) // Hosts and resources are built together by Up
	}
	return l
}

// RunAll runs every phase Repeat times, in order.
func (r *Runner) RunAll(phases []*Phase) ([]*PhaseResult, error) {
	var total time.Duration
	for _, p := range phases {
		total += p.Length * time.Duration(max(r.opts.Repeat, 1))
	}
	r.progress.start(total)
	defer r.progress.done()
	var out []*PhaseResult
	for rep := 0; rep < max(r.opts.Repeat, 1); rep++ {
		for _, p := range phases {
			res, err := r.Run(p, rep)
			if err != nil {
				return out, fmt.Errorf("phase %s: %w", p.Name, err)
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// Run executes one phase: fio on every host with jobs, a 100 ms diskstats
// sampler on the target, timed events, TCP counters around it and every
// second in each namespace. Once the run's context is done it ends the
// phase's fio and returns the context's error.
//
// Its loop stays in Run because it owns the sampler, the timed events and
// fio's exit, whose timing depends on each other; the fio commands, the
// sampling and the counters are functions of their own.
func (r *Runner) Run(p *Phase, rep int) (*PhaseResult, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	res := &PhaseResult{Phase: p, Repeat: rep}
	pdir := filepath.Join(r.Dir, fmt.Sprintf("%s.r%d", p.Name, rep))
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return nil, err
	}
	hosts := map[string]bool{}
	for _, j := range p.Jobs {
		hosts[j.Host] = true
	}
	before := tcpByNS()
	// Start fio everywhere at once; jobs carry their own start offsets.
	cmds, err := fioCommands(p, hosts, pdir)
	if err != nil {
		return nil, err
	}
	sp, err := r.newPhaseSampler(p, rep)
	if err != nil {
		return nil, err
	}
	host := watchHost(!r.opts.NoStallWatch)
	defer host.end() // on an early return; a no-op after host.stop
	t0 := time.Now()
	res.Start = t0
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			return nil, err
		}
	}
	fw := waitFio(cmds)
	reach("run:phase")
	tw := newTCPWatch(cmds)
	events := append([]Event(nil), p.Events...)
	sort.Slice(events, func(i, k int) bool { return events[i].At < events[k].At })
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := t0.Add(p.Length)
	var evErr error
	// fioCh goes nil once fio has exited: a closed channel is always ready
	// and would spin this loop until the window's end.
	fioCh := fw.done
loop:
	for {
		select {
		case now := <-tick.C:
			for len(events) > 0 && now.Sub(t0) >= events[0].At {
				if err := events[0].Do(); err != nil && evErr == nil {
					evErr = fmt.Errorf("event %s: %w", events[0].Name, err)
				}
				events = events[1:]
			}
			t, err := sp.sample(now.Sub(t0))
			if err != nil {
				return nil, err
			}
			res.Ticks = append(res.Ticks, t)
			tw.sample(now.Sub(t0))
			r.progress.advance(p.Label, 100*time.Millisecond)
			if now.After(deadline) || (fioCh == nil && now.Sub(t0) >= p.To) {
				break loop
			}
		case <-fioCh:
			if time.Now().After(t0.Add(p.To)) {
				break loop
			}
			fioCh = nil
		case <-r.ctx.Done():
			for _, c := range cmds {
				c.Process.Kill()
			}
			<-fw.done
			return nil, r.ctx.Err()
		}
	}
	if err := fw.waitBounded(cmds, Limits.Fio); err != nil {
		return nil, err
	}
	r.trace.Flush()
	if err := host.stop(res, filepath.Join(pdir, "stalls.csv")); err != nil {
		return nil, err
	}
	res.TCPByNS, res.TCP = tcpSince(before)
	res.TCPSeries = tw.series
	if err := tw.writeCSV(filepath.Join(pdir, "tcp.csv")); err != nil {
		return nil, err
	}
	if res.Reader, err = readReaderLogs(pdir); err != nil {
		return nil, err
	}
	res.Queue = r.queue(t0, time.Now())
	reach("run:phase-done")
	if len(fw.errs) > 0 {
		res.FioErr = fmt.Errorf("fio failed: %s (see %s/*.stderr)", strings.Join(fw.errs, "; "), pdir)
		return res, res.FioErr
	}
	return res, evErr
}

// queue is the run's resource's modelled queue from its supervisor's log
// between from and to, as seconds after from (nil: no log).
func (r *Runner) queue(from, to time.Time) *report.Backlog {
	if r.Res == nil || r.Res.Mount == "" {
		return nil
	}
	recs, err := diskmodel.ReadLog(QueueLog(r.Res.Name), from, to)
	if err != nil || len(recs) == 0 {
		return nil
	}
	b := &report.Backlog{}
	for _, rec := range recs {
		b.At, b.Until = append(b.At, rec.At.Sub(from).Seconds()), append(b.Until, rec.Free.Sub(from).Seconds())
	}
	return b
}

func ff(v float64, prec int) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// TCPCounters are the TCP counters that tell loss from its look-alikes
// (shared with the simulator's summaries).
type TCPCounters = report.TCPCounters

// tcpByNS reads the counters of the target and initiator namespaces.
func tcpByNS() map[string]TCPCounters {
	out := map[string]TCPCounters{}
	var nss []string
	for _, ns := range Namespaces()[1:] {
		if nsExists(ns) {
			nss = append(nss, ns)
		}
	}
	if len(kernelClientDevs()) > 0 {
		// The kernel initiator's connections are the initial
		// namespace's, all clients together ("").
		nss = append(nss, "")
	}
	for _, ns := range nss {
		if c, err := ReadTCPCounters(ns); err == nil {
			out[ns] = c
		}
	}
	return out
}

// ReadTCPCounters reads the TCP counters of network namespace ns ("" the
// initial one) on a thread moved into it: /proc/TID/net is the thread's
// namespace's, so no process is started.
func ReadTCPCounters(ns string) (TCPCounters, error) {
	if ns == "" {
		return ReadTCPCountersOf(os.Getpid())
	}
	var c TCPCounters
	err := inNetns(ns, func() (err error) {
		c, err = ReadTCPCountersOf(unix.Gettid())
		return err
	})
	return c, err
}

// ReadTCPCountersOf reads the TCP counters of the network namespace pid
// runs in, from /proc/PID/net: the lab samples the agent's namespace (the
// target's) this way every second of a phase.
func ReadTCPCountersOf(pid int) (TCPCounters, error) {
	return readTCPCounters(procfs.DefaultMountPoint, pid)
}

// readTCPCounters reads PID/net/snmp and PID/net/netstat under the proc
// mount point proc (procfs parses them).
func readTCPCounters(proc string, pid int) (TCPCounters, error) {
	fs, err := procfs.NewFS(proc)
	if err != nil {
		return TCPCounters{}, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return TCPCounters{}, err
	}
	snmp, err := p.Snmp()
	if err != nil {
		return TCPCounters{}, err
	}
	if snmp.RetransSegs == nil {
		return TCPCounters{}, fmt.Errorf("no Tcp RetransSegs in %s/%d/net/snmp", proc, pid)
	}
	x, err := p.Netstat()
	if err != nil {
		return TCPCounters{}, err
	}
	// The segments a host's TCP received and dropped (RcvDrops).
	drops := n(x.TCPRcvQDrop) + n(x.TCPBacklogDrop) + n(x.RcvPruned) + n(x.TCPOFODrop) + n(x.OfoPruned)
	return TCPCounters{RetransSegs: n(snmp.RetransSegs), LossProbes: n(x.TCPLossProbes), DSACKRecv: n(x.TCPDSACKRecv),
		Timeouts: n(x.TCPTimeouts), HostQueueSkips: n(x.TCPSpuriousRtxHostQueues), FastRetrans: n(x.TCPFastRetrans), RcvDrops: drops}, nil
}

// n is a counter procfs read, 0 where the kernel has none.
func n(v *float64) uint64 {
	if v == nil {
		return 0
	}
	return uint64(*v)
}

// WriteSummary saves summary.json.
func (r *Runner) WriteSummary(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if r.State != nil {
		b = withISCSIFields(b, r.State.Options)
	}
	return os.WriteFile(filepath.Join(r.Dir, "summary.json"), append(withGuestFields(b, GuestAccel(), kernelRelease()), '\n'), 0o644)
}
