package experiments

import (
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

// tcpSides splits a phase's TCP counters by sender: the interferers'
// hosts (Hosts[1:], "writers" in the summary), the reader's (b2) and the
// target.
func tcpSides(res *lab.PhaseResult) report.TCPSides {
	var s report.TCPSides
	for ns, c := range res.TCPByNS {
		switch {
		case lab.IsTargetNS(ns):
			s.Target = s.Target.Add(c)
		case ns == "b2":
			s.Reader = s.Reader.Add(c)
		default:
			s.Writers = s.Writers.Add(c)
		}
	}
	return s
}

// controlledWriters is the number of writer threads of pid, autonomic and
// the oracle's probes: the thesis' 12 unless the run says otherwise.
func (r *runner) controlledWriters() int {
	if r.opts.Writers > 0 {
		return r.opts.Writers
	}
	return 12
}

// controlledRun is a run's figures (thr 0: the baseline's); reads: the
// interferers read too (interferers.reads), so their reads are counted and
// date a load step as their writes do.
func controlledRun(res *lab.PhaseResult, thr time.Duration, steps []float64, onS float64, reads bool) ControlledRun {
	waits := report.Values(res.Window(), "b2", readWait)
	run := ControlledRun{ThresholdMs: float64(thr) / 1e6, ReadWaitMs: roundDist(report.Describe(waits)), WriteMBs: round(report.Aggregate(res.Window(), lab.Hosts[1:], writeMBs), 2), TCP: res.TCP}
	ticks := res.Ticks
	if reads {
		run.ReadMBs = round(report.Aggregate(res.Window(), lab.Hosts[1:], readMBs), 2)
		ticks = report.ReadsAsWrites(ticks, "b2")
	}
	onset := report.FirstSecond(ticks, "b2", lab.Hosts[1:], steps, onS)
	run.Onset = &onset
	s := tcpSides(res)
	run.TCPBySide = &s
	if res.Host != (report.HostCPU{}) {
		run.Host = &res.Host
	}
	if thr == 0 {
		return run
	}
	x, y := res.Series("b2", readWait)
	run.PctAbove, run.SettleS = report.Regulation(run.ThresholdMs, waits, x, y, steps, onS)
	return run
}

func lateSummary(l throttle.Lateness) *report.LateSummary {
	ms := func(d time.Duration) float64 { return round(float64(d)/1e6, 3) }
	return &report.LateSummary{
		P50: ms(l.Quantile(0.5)), P99: ms(l.Quantile(0.99)), Max: ms(l.Max),
		PctOver2: round(100*l.Over(2*time.Millisecond), 2), Releases: l.Count,
	}
}
