package experiments

import (
	"cmp"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// ControlledRun and ControlledSummary are the controlled experiments'
// summary.json (pid, autonomic, read-backup, mixed; in report, shared
// with the simulator). The experiments themselves are in controlled.go.
type (
	ControlledRun     = report.ControlledRun
	ControlledSummary = report.ControlledSummary
)

// Thresholds of the pid experiment (thesis Fig 5.9).
var Thresholds = []time.Duration{10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond}

// AutonomicThresholds adds 5 ms to the thesis' three: near the modelled
// group's own service time for a random 8 KiB read (~6.3 ms at qd 1), so
// the run shows where slowing writers stops helping
// (ControlledRun.Unreachable) rather than only where it works.
var AutonomicThresholds = append([]time.Duration{5 * time.Millisecond}, Thresholds...)

// The sides a phase's TCP counters are split by: the interferers' hosts
// (Hosts[1:], "writers" in the summary), the reader's (b2) and the
// target.
func isTarget(ns string) bool  { return lab.IsTargetNS(ns) }
func isReader(ns string) bool  { return ns == "b2" }
func isWriters(ns string) bool { return !isTarget(ns) && !isReader(ns) }

// tcpSides splits a phase's TCP counters by sender.
func tcpSides(res *lab.PhaseResult) report.TCPSides {
	var s report.TCPSides
	for ns, c := range res.TCPByNS {
		switch {
		case isTarget(ns):
			s.Target = s.Target.Add(c)
		case isReader(ns):
			s.Reader = s.Reader.Add(c)
		default:
			s.Writers = s.Writers.Add(c)
		}
	}
	return s
}

// atStallsBySide matches one TCP counter of each side to the phase's
// stalls (nil where they were not watched), with match one of
// PhaseResult's ProbesAtStalls or RetransAtStalls: a spurious probe or
// retransmission that came in a second the machine stalled says the
// machine, not the delay line, held the segment past the sender's timer.
func atStallsBySide(res *lab.PhaseResult, match func(side func(ns string) bool) *report.ProbesAtStalls) *report.ProbesAtStallsBySide {
	if !res.StallsWatched() {
		return nil
	}
	return &report.ProbesAtStallsBySide{Writers: match(isWriters), Reader: match(isReader), Target: match(isTarget)}
}

// controlledWriters is the number of writer threads of pid, autonomic and
// the oracle's probes: the thesis' 12 unless the run says otherwise.
func (r *runner) controlledWriters() int { return cmp.Or(r.opts.Writers, 12) }

// controlledRun is a run's figures (report.JudgeControlled; reads: the
// interferers read too, interferers.reads; q where the queue was logged
// and an agent acted) and the lab's own: TCP, the initiator's latency,
// stalls and host CPU.
func controlledRun(res *lab.PhaseResult, thr time.Duration, steps []float64, onS float64, reads bool, q *report.OnsetQueue) ControlledRun {
	run := report.JudgeControlled(res.Ticks, res.Window(), "b2", lab.Hosts[1:], thr, steps, onS, reads, q)
	run.TCP, run.Initiator = res.TCP, initiator(res)
	s := tcpSides(res)
	run.TCPBySide = &s
	if by := atStallsBySide(res, res.ProbesAtStalls); by != nil {
		run.LossProbesAtStalls, run.LossProbesAtStallsBySide = by.Target, by
		run.RetransAtStallsBySide = atStallsBySide(res, res.RetransAtStalls)
	}
	if res.Host != (report.HostCPU{}) {
		run.Host = &res.Host
	}
	return run
}

// initiator is the protected reader's latency at the initiator over the
// results' windows, pooled (nil where no read was logged).
func initiator(rs ...*lab.PhaseResult) *report.InitiatorLatency {
	var each, windows []float64
	for _, res := range rs {
		e, w := lab.ReaderWindow(res.Reader, res.Phase.From, res.Phase.To)
		each, windows = append(each, e...), append(windows, w...)
	}
	if len(each) == 0 {
		return nil
	}
	return &report.InitiatorLatency{ReadMs: report.RoundDist(report.Describe(each)), WindowMs: report.RoundDist(report.Describe(windows))}
}

func lateSummary(l throttle.Lateness) *report.LateSummary {
	ms := func(d time.Duration) float64 { return report.Round(float64(d)/1e6, 3) }
	return &report.LateSummary{
		P50: ms(l.Quantile(0.5)), P99: ms(l.Quantile(0.99)), Max: ms(l.Max),
		PctOver2: report.Round(100*l.Over(2*time.Millisecond), 2), Releases: l.Count,
	}
}

// totals sums TCP and the agents' costs over the runs so far.
func (cr *controlledRuns) totals() {
	sum := &cr.sum
	sum.TCP = sumTCP(cr.all)
	sum.Retrans = sum.TCP.RetransSegs
	var sides, reg report.TCPSides
	for i, res := range cr.all {
		s := tcpSides(res)
		sides = sides.Add(s)
		if i > 0 {
			reg = reg.Add(s)
		}
	}
	sum.TCPBySide, sum.RegulatedTCPBySide = &sides, &reg
	regRetrans := reg.Total().RetransSegs
	sum.RegulatedRetrans = &regRetrans
	if cr.wall <= 0 {
		return
	}
	sum.AgentCPUPct = report.Round(100*cr.cpu/cr.wall, 2)
	if !cr.c.bridge {
		sum.ControlCPUPct = report.Round(100*cr.shadowCPU/cr.wall, 2)
		if cr.held > 0 {
			sum.DelayLinePackets = cr.held
			sum.DelayLineUSPerPacket = report.Round(1e6*(cr.cpu-cr.shadowCPU)/float64(cr.held), 1)
		}
	}
	if cr.late.Count > 0 {
		sum.DelayLineLate = lateSummary(cr.late)
	}
}

// plot draws the reader's wait per threshold, the interferers' rate, the
// delay applied and (if any) the write caps.
func (cr *controlledRuns) plot(thresholds []time.Duration) error {
	t := report.ControlledTitlesOf(cr.name, cr.sum.Writers, cr.c.load.reads, cr.c.load.many)
	if len(cr.plots.Caps) > 0 {
		t.Caps = cr.name + ": the second lever, sum of the capped writers' write-rate caps (0: none)"
	}
	return cr.plots.Write(cr.r.Dir, t, thresholds)
}
