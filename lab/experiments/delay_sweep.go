package experiments

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
	"github.com/spf13/pflag"
)

// flagStreams is delay-sweep's fio threads on the swept session's host
// (0: one, the thesis' single stream): the many-stream read path.
var flagStreams = newFlag("streams", "concurrent streams on the swept host, each one I/O in flight (default 1, the thesis'); more sweep 0–40 ms",
	func(fs *pflag.FlagSet, o *Options, n, h string) { fs.IntVar(&o.Streams, n, 0, h) }, nil)

// delaySweep: Rate vs added delay on an established session (thesis Fig 5.5/5.6).
func init() {
	register(&Experiment{Name: "delay-sweep", DefaultScale: 0.25, Flags: []*Flag{flagBackends, flagStreams},
		Title: "Rate vs added delay 0–9.6 ms on an established session, reads and writes, repeated (Fig 5.5/5.6)", Run: func(r *runner) (any, error) { return r.eachBackend("delay-sweep", r.delaySweepSession) }, Plots: []report.SummaryPlot{report.RateVsDelayPlot}})
}

// delaySweepSession changes the delay on established iSCSI sessions, as
// a controller does and as the thesis' long-lived kernel-initiator
// sessions saw it: with libiscsi one per stream and direction, opened by
// fio for the direction's whole sweep; with the kernel initiator b2's one
// session, logged in at lab up, for every stream and both directions.
// (A new session per point measures something else: with the delay
// already in place, CUBIC's HyStart sees the RTT jump by more than its
// 4 ms minimum and ends slow start at a small window; see
// delay-sweep-fresh.)
func (r *runner) delaySweepSession(backend string) (backendRun, error) {
	a, err := r.startAgent(backend, thesisWrites...)
	if err != nil {
		return nil, err
	}
	defer a.Stop()
	pl := r.sweepPlan()
	sum := newSweepSummary("delay-sweep", sweepSession(r.State))
	sum.Streams = pl.streams
	var all []*lab.PhaseResult
	for _, dir := range []string{"read", "write"} {
		res, err := r.sweepDirection(a, pl, dir, sum)
		if err != nil {
			return nil, err
		}
		all = append(all, res)
	}
	sum.runTCP = tcpOf(all)
	return sum, a.Clear()
}

// sweepPlan is delay-sweep's schedule and where the swept session's two
// ends keep their TCP counters.
type sweepPlan struct {
	step, lead    time.Duration
	reps, streams int
	delays        []time.Duration
	// targetNS and initiatorNS are the namespaces whose TCP counters are
	// the session's target and initiator ends (ClientTCPNS: with the
	// kernel initiator the initial namespace, every client's sessions).
	targetNS, initiatorNS string
}

func (r *runner) sweepPlan() sweepPlan {
	streams := max(r.opts.Streams, 1)
	return sweepPlan{step: max(r.Scale(20*time.Second), 2*time.Second), lead: 2 * time.Second,
		reps: max(r.opts.Repeat, 3), streams: streams, delays: sweepDelays(streams),
		targetNS: lab.TargetNS, initiatorNS: r.State.ClientTCPNS("b2")}
}

// length is a direction's fio runtime: the lead and every step.
func (pl sweepPlan) length() time.Duration {
	return pl.lead + time.Duration(len(pl.delays)*pl.reps)*pl.step
}

// sweepSession is summary.json's "session": which sessions carried the
// sweep.
func sweepSession(s *lab.State) string {
	if s != nil && s.Options.InitiatorKind() == lab.InitiatorKernel {
		return "b2's one kernel-initiator session (logged in at lab up) for both directions, delay changed on it"
	}
	return "one per direction, delay changed on it"
}

// sweepPhase is direction dir's phase, without its events: the streams
// on b2's LUN as the lab reaches it (LUN.URL: a libiscsi URL, or the
// kernel initiator's block device, whose one session carries them all).
func (r *runner) sweepPhase(pl sweepPlan, dir string) *lab.Phase {
	length := pl.length()
	return &lab.Phase{Name: dir, Label: dir + " sweep", Length: length + time.Second, From: 0, To: length,
		Jobs: []lab.Job{{Name: "sweep", Host: "b2", URL: r.LUN("b2").URL, RW: dir, BS: 64 << 10, NumJobs: pl.streams, Runtime: length}}}
}

// sweepDirection runs direction dir's sweep through agent a and adds its
// points, fit and plots to sum.
func (r *runner) sweepDirection(a *lab.LabAgent, pl sweepPlan, dir string, sum *SweepSummary) (*lab.PhaseResult, error) {
	p := r.sweepPhase(pl, dir)
	n := len(pl.delays)
	b2 := lab.HostAddr("b2")
	// Counters at each change, so each step's TCP events are known.
	var marksT, marksI []lab.TCPCounters // target, initiator
	for k := 0; k < n*pl.reps; k++ {
		d := pl.delays[k%n]
		set := sweepSetting(dir, d)
		p.Events = append(p.Events, lab.Event{At: pl.lead + time.Duration(k)*pl.step, Name: d.String(), Do: func() error {
			t, i, err := pl.readTCP()
			if err != nil {
				return err
			}
			marksT, marksI = append(marksT, t), append(marksI, i)
			return a.Set(map[netip.Addr]throttle.Setting{b2: set})
		}})
	}
	// The lead runs undelayed (the read sweep ends at its largest delay):
	// its first seconds (with libiscsi its login too) are the
	// unthrottled control.
	if err := a.Clear(); err != nil {
		return nil, err
	}
	lead0T, lead0I, err := pl.readTCP()
	if err != nil {
		return nil, err
	}
	res, err := r.Run(p, 0)
	if err != nil {
		return nil, err
	}
	endT, endI, err := pl.readTCP()
	if err != nil {
		return nil, err
	}
	marksT, marksI = append(marksT, endT), append(marksI, endI)
	if len(marksT) > 1 {
		sum.LeadTCP = sum.LeadTCP.Add(marksT[0].Sub(lead0T)).Add(marksI[0].Sub(lead0I))
	}
	pts, xs, ys := sweepPoints(res, dir, pl.delays, marksT, marksI, pl.lead, pl.step, pl.reps)
	sum.Points = append(sum.Points, pts...)
	how := fmt.Sprintf(" on one session, %d repeats", pl.reps)
	if pl.streams > 1 {
		how = fmt.Sprintf(" on %d streams, %d repeats", pl.streams, pl.reps)
	}
	return res, sum.fitDirection(r.Dir, dir, xs, ys, how)
}

// sweepPoints reads direction dir's run res: each of the delays' mean
// rate over its reps steps (each step's first second skipped), and the
// TCP events of its steps from the counters marked at each change; xs and
// ys are every step's delay and rate, for the fit.
func sweepPoints(res *lab.PhaseResult, dir string, delays []time.Duration, marksT, marksI []lab.TCPCounters, lead, step time.Duration, reps int) (pts []SweepPoint, xs, ys []float64) {
	n := len(delays)
	f := rateOf(dir)
	for i, d := range delays {
		pt := SweepPoint{Direction: dir, DelayMs: float64(d) / 1e6}
		for rep := 0; rep < reps; rep++ {
			// Skip the first second of a step: the queue and the TCP
			// window settle.
			from := lead + time.Duration(rep*n+i)*step + time.Second
			to := lead + time.Duration(rep*n+i+1)*step
			m, _ := report.MeanStderr(report.Values(res.Between(from, to), "b2", f))
			pt.Repeats = append(pt.Repeats, report.Round(m, 3))
			xs, ys = append(xs, pt.DelayMs), append(ys, m)
		}
		m, se := report.MeanStderr(pt.Repeats)
		pt.MBs, pt.Stderr = report.Round(m, 3), report.Round(se, 3)
		pt.TCPTarget, pt.TCPInitiator = pointTCP(marksT, n, reps, i), pointTCP(marksI, n, reps, i)
		if pt.TCPTarget != nil && pt.TCPInitiator != nil {
			c := pt.TCPTarget.Add(*pt.TCPInitiator)
			pt.TCP = &c
		}
		pts = append(pts, pt)
	}
	return pts, xs, ys
}
