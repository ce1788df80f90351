package experiments

// slo-classes' figures: each class's IOPS, MB/s and wait over a run's
// window, computed independently from the target's diskstats and fio's
// logs, and from the agent's own status polls, so one checks the other.

import (
	"cmp"
	"math"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// ClassFigures are one class's figures over a run's window: attained IOPS,
// MB/s and wait from the target's diskstats (the members' LUNs), fio's
// completion latency at the initiator, and seed 004's eq. (1), eq. (2)
// and jitter; Agent is the same from the agent's own status.
type ClassFigures struct {
	Name               string   `json:"name"`
	Members            []string `json:"members"`
	Priority           int      `json:"priority,omitempty"`
	IOPSObjective      float64  `json:"iops_objective,omitempty"`
	MBsObjective       float64  `json:"mb_s_objective,omitempty"`
	LatencyObjectiveMs float64  `json:"latency_objective_ms,omitempty"`
	BurstS             float64  `json:"burst_s,omitempty"`
	// From diskstats: means over the window (latency I/O-weighted), and
	// the distribution of the per-100 ms I/O-weighted wait.
	IOPS          agent.JSONFloat `json:"iops"`
	MBs           agent.JSONFloat `json:"mb_s"`
	MeanLatencyMs agent.JSONFloat `json:"mean_latency_ms"`
	LatencyP50Ms  agent.JSONFloat `json:"latency_p50_ms"`
	LatencyP95Ms  agent.JSONFloat `json:"latency_p95_ms"`
	// From fio: the initiator's completion latency (network and any
	// delay included), its 100 ms averages over the window.
	FioClatP50Ms agent.JSONFloat `json:"fio_clat_p50_ms"`
	FioClatP95Ms agent.JSONFloat `json:"fio_clat_p95_ms"`
	// Seed 004: eq. (1) on IOPS and on MB/s, eq. (2), jitter.
	IOPSDeviationPct       agent.JSONFloat `json:"iops_deviation_pct"`
	ThroughputDeviationPct agent.JSONFloat `json:"throughput_deviation_pct"`
	LatencyDeviationMs     agent.JSONFloat `json:"latency_deviation_ms"`
	JitterMs               agent.JSONFloat `json:"jitter_ms"`
	// Met: throughput no more than 5 % below its objectives (the policy's
	// tolerance) and mean latency at or below its objective.
	Met   bool               `json:"met"`
	Agent *AgentClassFigures `json:"agent,omitempty"`
}

// AgentClassFigures are a class's figures as the agent's status reports
// them. Means and deviations cover the window exactly: they are the
// difference of the agent's running totals (mean × seconds) between the
// status polls at the window's ends. Jitter is the agent's own, over its
// life (from the phase's start to the window's end): a jitter cannot be
// differenced.
type AgentClassFigures struct {
	IOPS                   agent.JSONFloat `json:"iops"`
	MBs                    agent.JSONFloat `json:"mb_s"`
	MeanLatencyMs          agent.JSONFloat `json:"mean_latency_ms"`
	IOPSDeviationPct       agent.JSONFloat `json:"iops_deviation_pct"`
	ThroughputDeviationPct agent.JSONFloat `json:"throughput_deviation_pct"`
	LatencyDeviationMs     agent.JSONFloat `json:"latency_deviation_ms"`
	JitterLifeMs           agent.JSONFloat `json:"jitter_life_ms"`
	// MissingPct is the share of the window's polls that flagged the
	// class missing; MeanDelayMs the delay the policy put on its members
	// (with the agent off, the dry-run agent's: what it would have put).
	MissingPct  float64 `json:"missing_pct"`
	MeanDelayMs float64 `json:"mean_delay_ms"`
}

func jf(x float64, d int) agent.JSONFloat {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return agent.JSONFloat(math.NaN())
	}
	v := report.Round(x, d)
	if v == 0 {
		v = 0 // not -0 in the summary
	}
	return agent.JSONFloat(v)
}

// ComputeClassFigures computes a class's figures over ticks (a window of
// the trace) the way the agent does per tick: the members' IOPS and MB/s
// summed, their I/O-weighted wait, means over the window (latency weighted
// by I/Os), seed 004's metrics against the objectives.
func ComputeClassFigures(c LabSLOClass, ticks []lab.Tick) ClassFigures {
	f := ClassFigures{Name: c.Name, Members: []string{c.Host}, Priority: c.Priority, IOPSObjective: c.IOPS, MBsObjective: c.MBs,
		LatencyObjectiveMs: ms(c.Latency), BurstS: c.Burst.Seconds(),
		FioClatP50Ms: jf(math.NaN(), 0), FioClatP95Ms: jf(math.NaN(), 0)}
	iops, mbs, lat, lats := report.ClassMeans(f.Members, ticks)
	d := report.Describe(lats)
	f.IOPS, f.MBs, f.MeanLatencyMs = jf(iops, 3), jf(mbs, 3), jf(lat, 3)
	if d.N > 0 {
		f.LatencyP50Ms, f.LatencyP95Ms = jf(d.P50, 3), jf(d.P95, 3)
	} else {
		f.LatencyP50Ms, f.LatencyP95Ms = jf(math.NaN(), 0), jf(math.NaN(), 0)
	}
	f.IOPSDeviationPct = jf(agent.ThroughputDeviationPct(iops, c.IOPS), 2)
	f.ThroughputDeviationPct = jf(agent.ThroughputDeviationPct(mbs, c.MBs), 2)
	f.LatencyDeviationMs = jf(agent.LatencyDeviation(lat, ms(c.Latency)), 3)
	f.JitterMs = jf(agent.Jitter(lats), 3)
	f.Met = report.ClassMet(float64(f.IOPSDeviationPct), float64(f.ThroughputDeviationPct), float64(f.LatencyDeviationMs))
	return f
}

// AgentFigures computes a class's figures from the agent's status polls
// over (from, to]: the polls nearest inside each end.
func AgentFigures(c LabSLOClass, polls []StatusSample, from, to time.Duration) *AgentClassFigures {
	var p0, p1 *agent.ClassStatus
	var n, missing int
	var delay float64
	for i := range polls {
		s := &polls[i]
		if s.T < from.Seconds() || s.T > to.Seconds() {
			continue
		}
		cs := s.class(c.Name)
		if cs == nil {
			continue
		}
		p0, p1 = cmp.Or(p0, cs), cs
		n++
		if cs.Missing {
			missing++
		}
		delay += cs.DelayMs
	}
	if p0 == nil || p1 == nil || p1.Seconds <= p0.Seconds {
		return nil
	}
	tot := func(mean agent.JSONFloat, secs float64) float64 {
		if math.IsNaN(float64(mean)) {
			return 0
		}
		return float64(mean) * secs
	}
	secs := p1.Seconds - p0.Seconds
	ios := tot(p1.MeanIOPS, p1.Seconds) - tot(p0.MeanIOPS, p0.Seconds)
	mb := tot(p1.MeanMBs, p1.Seconds) - tot(p0.MeanMBs, p0.Seconds)
	// The agent's latency total is mean × its I/Os (every tick with IOPS
	// has a wait), so the window's is the difference of mean × I/Os.
	lat := math.NaN()
	if ios > 0 {
		lat = (tot(p1.MeanLatencyMs, float64(p1.MeanIOPS)*p1.Seconds) - tot(p0.MeanLatencyMs, nanTo0(float64(p0.MeanIOPS))*p0.Seconds)) / ios
	}
	iops, mbs := ios/secs, mb/secs
	a := &AgentClassFigures{IOPS: jf(iops, 3), MBs: jf(mbs, 3), MeanLatencyMs: jf(lat, 3),
		IOPSDeviationPct:       jf(agent.ThroughputDeviationPct(iops, c.IOPS), 2),
		ThroughputDeviationPct: jf(agent.ThroughputDeviationPct(mbs, c.MBs), 2),
		LatencyDeviationMs:     jf(agent.LatencyDeviation(lat, ms(c.Latency)), 3),
		JitterLifeMs:           jf(float64(p1.JitterMs), 3),
		MissingPct:             report.Round(100*float64(missing)/float64(n), 1),
		MeanDelayMs:            report.Round(delay/float64(n), 2)}
	return a
}

func nanTo0(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return x
}

// SummarizeSLORun computes one run's figures from its trace window, the
// agent's polls and fio's output directory (empty: no fio figures).
func SummarizeSLORun(name, policy string, res *lab.PhaseResult, polls []StatusSample, fioDir string) SLORun {
	run := SLORun{Name: name, Policy: policy, TCP: res.TCP}
	w := res.Window()
	for _, c := range SLOLabClasses {
		f := ComputeClassFigures(c, w)
		if fioDir != "" {
			// One job per class host: its log is HOST_clat.1.log.
			// Its 100 ms averages' distribution over the window.
			if ios, err := lab.ReadFioLatLog(filepath.Join(fioDir, c.Host+"_clat.1.log")); err == nil && len(ios) > 0 {
				v, _ := lab.ReaderWindow(ios, res.Phase.From, res.Phase.To)
				d := report.Describe(v)
				f.FioClatP50Ms, f.FioClatP95Ms = jf(d.P50, 3), jf(d.P95, 3)
			}
		}
		f.Agent = AgentFigures(c, polls, res.Phase.From, res.Phase.To)
		run.Classes = append(run.Classes, f)
	}
	run.BulkMBs = report.Round(report.Aggregate(w, []string{sloBulkHost}, writeMBs), 2)
	return run
}

// classSeries is f of one host's class ticks over a phase.
func classSeries(ticks []lab.Tick, host string, f func(report.ClassTick) float64) (x, y []float64) {
	for _, ct := range report.ClassTicks([]string{host}, ticks) {
		x = append(x, ct.T)
		y = append(y, f(ct))
	}
	return x, y
}
