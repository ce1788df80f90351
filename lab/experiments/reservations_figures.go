package experiments

// reservations' figures: what the reserved writer attained per period,
// the network and disk indicators the agent saw, and their plots.

import (
	"math"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// resvIndicatorSeries are a run's network and disk indicators over time,
// as the agent saw them (agent off: the network's undiscounted).
func resvIndicatorSeries(label, mode string, samples []resvSample) (report.Series, report.Series) {
	var x, q, d []float64
	for _, s := range samples {
		x = append(x, s.t)
		q, d = append(q, nanIfNil(s.st.Network, func(n *agent.NetStatus) float64 {
			if mode == "off" {
				return float64(n.RawQueueMs)
			}
			return float64(n.QueueMs)
		})), append(d, s.st.IndicatorMs)
	}
	return report.Series{Name: label, X: x, Y: q}, report.Series{Name: label, X: x, Y: d}
}

// resvAttainedSeries is what the reserved writer attained in each period
// of run, at the period's end.
func resvAttainedSeries(label string, run ResvRun) report.Series {
	px := make([]float64, len(run.AttainedMB))
	for i := range px {
		px[i] = run.FirstPeriodS + float64(i+1)*resvPeriod.Seconds()
	}
	return report.Series{Name: label, X: px, Y: run.AttainedMB}
}

// resvPlots draws the network and disk indicators of every run and what
// the reserved writer attained under the net-bound load.
func (r *runner) resvPlots(qSeries, dSeries, aSeries []report.Series) error {
	if err := report.TimePlot(filepath.Join(r.Dir, "net-indicator.png"), "Network indicator: queueing delay srtt − min_rtt (least-delayed active flow, our delay discounted; agent off: undiscounted)",
		"time (s)", "ms", qSeries, []report.Line{{Name: "net_threshold", Y: ms(resvNetThres)}}); err != nil {
		return err
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "disk-indicator.png"), "Disk indicator: smoothed read wait of the resource",
		"time (s)", "ms", dSeries, []report.Line{{Name: "threshold", Y: 15}}); err != nil {
		return err
	}
	return report.TimePlot(filepath.Join(r.Dir, "reserved-attained.png"), "Reserved writer: MB attained per 1 s period (net-bound load)",
		"time (s)", "MB per period", aSeries, []report.Line{{Name: "reservation", Y: resvBytes / 1e6}})
}

func nanIfNil[T any](p *T, f func(*T) float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return f(p)
}

// resvRun is one run's figures: what the reserved writer attained per
// agent period, and the saturation indicators the agent saw.
func resvRun(res *lab.PhaseResult, samples []resvSample, load, mode string, from, to time.Duration) ResvRun {
	run := ResvRun{Load: load, Agent: mode, ReservedMB: resvBytes / 1e6, TCP: res.TCP, AttainedMB: []float64{}}
	resvAttained(&run, res, samples, from, to)
	run.Attained = report.RoundDist(report.Describe(run.AttainedMB))
	run.OthersMBs = report.Round(report.Aggregate(res.Window(), []string{"b3", "b4"}, writeMBs), 2)
	run.ReaderWaitMs = report.RoundDist(report.Describe(report.Values(res.Window(), "b5", readWait)))
	resvIndicators(&run, samples, mode, from, to)
	return run
}

// resvAttained fills in what the reserved writer attained in each period
// within (from, to].
func resvAttained(run *ResvRun, res *lab.PhaseResult, samples []resvSample, from, to time.Duration) {
	// Attained per period from the reserved consumer's LUN writes, on the
	// agent's own period boundaries (RAD's periods are the dispatcher's),
	// mapped onto the phase's time by a status sample (events fire on the
	// runner's 100 ms ticks, so a few ms off at most); without one, on
	// periods from the window's start.
	per := resvPeriod.Seconds()
	first := from.Seconds()
	for _, s := range samples {
		if len(s.st.Reservations) == 0 || s.st.Reservations[0].PeriodStart.IsZero() {
			continue
		}
		rel := s.t - s.wall.Sub(s.st.Reservations[0].PeriodStart).Seconds() // the period's start, phase time
		first = rel + math.Ceil((from.Seconds()-rel)/per-1e-9)*per
		run.PeriodsAlignedToAgent = true
		break
	}
	run.FirstPeriodS = report.Round(first, 3)
	for start := first; start+per <= to.Seconds()+1e-9; start += per {
		var mb, prev float64
		for _, t := range res.Ticks {
			if t.T > start && t.T <= start+per {
				if iv, ok := t.Dev[resvHost]; ok {
					// A recorded trace (LoadTrace) has no interval length:
					// the ticks' spacing is it.
					dt := iv.Seconds
					if dt <= 0 && prev > 0 {
						dt = t.T - prev
					}
					mb += iv.WriteBps * dt / 1e6
				}
			}
			prev = t.T
		}
		run.AttainedMB = append(run.AttainedMB, report.Round(mb, 3))
		run.Periods++
		if mb >= resvBytes/1e6 {
			run.PeriodsMet++
		}
	}
	if run.Periods > 0 {
		run.PctMet = report.Round(100*float64(run.PeriodsMet)/float64(run.Periods), 1)
	}
}

// resvIndicators fills in the run's indicators, as the agent's samples
// within (from, to] saw them, and the hosts it throttled.
func resvIndicators(run *ResvRun, samples []resvSample, mode string, from, to time.Duration) {
	var q, raw, d, lax []float64
	var n, cong, disk, risk int
	throttled := map[string]bool{}
	for _, s := range samples {
		if s.t <= from.Seconds() || s.t > to.Seconds() {
			continue
		}
		n++
		d = append(d, s.st.IndicatorMs)
		if ns := s.st.Network; ns != nil {
			raw = append(raw, float64(ns.RawQueueMs))
			if mode == "off" {
				q = append(q, float64(ns.RawQueueMs))
			} else {
				q = append(q, float64(ns.QueueMs))
			}
			// Off: the agent's own flag discounted delays it never applied.
			if ns.Congested && mode != "off" || mode == "off" && float64(ns.RawQueueMs) > float64(ns.ThresholdMs) {
				cong++
			}
			if ns.DiskSaturated {
				disk++
			}
		}
		for _, rv := range s.st.Reservations {
			lax = append(lax, float64(rv.LaxityPct))
			if rv.AtRisk {
				risk++
			}
			run.AgentPeriods, run.AgentPeriodsMet = rv.Periods, rv.PeriodsMet
		}
		run.MaxDelayMs = math.Max(run.MaxDelayMs, s.maxDelay)
		if mode != "off" {
			for _, c := range s.st.Consumers {
				if c.Throttled {
					throttled[c.Addr] = true
				}
			}
		}
	}
	run.NetQueueMs, run.NetRawQueueMs = report.RoundDist(report.Describe(q)), report.RoundDist(report.Describe(raw))
	run.DiskIndicator, run.LaxityPct = report.RoundDist(report.Describe(d)), report.RoundDist(report.Describe(lax))
	if n > 0 {
		run.PctCongested = report.Round(100*float64(cong)/float64(n), 1)
		run.PctDiskSaturated = report.Round(100*float64(disk)/float64(n), 1)
		run.PctAtRisk = report.Round(100*float64(risk)/float64(n), 1)
	}
	run.ThrottledHosts = []string{}
	for _, h := range lab.Hosts {
		if throttled[lab.HostAddr(h).String()] {
			run.ThrottledHosts = append(run.ThrottledHosts, h)
		}
	}
}
