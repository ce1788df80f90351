package experiments

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// sloClasses: Seed 004's SLO classes vs a bulk writer, then a burst.
type sloClasses struct{}

func (sloClasses) Spec() Spec {
	return Spec{Name: "slo-classes", DefaultScale: 1,
		Title: "Seed 004's power/knowledge/task readers vs a bulk writer: agent off vs the slo-classes policy, then a burst"}
}

func (sloClasses) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runSLOClassesLab(wrap(r, o))
}

// The policies' lab experiments (issue 6): slo-classes and weighted with
// the real tgt, fio and agent, each against a baseline in the same
// invocation. The agent's own per-class accounting (its status) and an
// independent computation from the target's diskstats and fio's output
// are both in the summary, so one checks the other.

// LabSLOClass is one of seed 004's classes mapped onto a lab initiator.
type LabSLOClass struct {
	Name     string
	Host     string
	Priority int
	IOPS     float64
	MBs      float64
	Latency  time.Duration
	Burst    time.Duration
}

// SLOLabClasses are seed 004's Table 1, 64 KB column (throughput = IOPS ×
// 64 KB, KB = 1000 bytes as the seed's figures have it), one class per
// initiator. The IOPS and MB/s objectives are the seed's: together 45
// random 64 KB reads a second, a third of what the modelled disk serves
// (a random 64 KB read costs it 5 ms seek + 0.2 ms + 1.6 ms transfer =
// 6.8 ms). The seed's latency objectives (1.3/2.4/6.4 ms) are below one
// such read for power and knowledge, so those are scaled to what the disk
// can deliver with the other classes reading beside them (power 10 ms,
// knowledge 15 ms, in the seed's order); task keeps the seed's 6.4 ms,
// which no read on this disk can meet: the experiment must also show the
// deviation reported where capacity does not allow.
var SLOLabClasses = []LabSLOClass{
	{"power", "b2", 3, 25, 1.6, 10 * time.Millisecond, 10 * time.Second},
	{"knowledge", "b3", 2, 15, 0.96, 15 * time.Millisecond, 10 * time.Second},
	{"task", "b4", 1, 5, 0.32, 6400 * time.Microsecond, 30 * time.Second},
}

// sloBulkHost is the bulk writer's initiator (in no class: best effort).
const sloBulkHost = "b5"

// sloBulkThreads is the bulk writer's threads (one 64 KiB write in flight
// each): enough to push every class's wait past its objective with the
// agent off, few enough that a 20 ms delay per write can make room.
const sloBulkThreads = 4

// sloMaxDelay is the slo-classes runs' max_delay.
const sloMaxDelay = 50 * time.Millisecond

// sloBS is the classes' block size: seed 004's 64 KB (1000-byte KB).
const sloBS = 64000

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

// classTick is a class's figures in one 100 ms tick of the trace.
type classTick struct {
	t, dt, ios, bytes, lat float64 // lat NaN: no I/O completed
}

// classTicks sums a class's members per tick; dt is the time since the
// previous tick (the sampler's interval, 0.1 s for the first).
func classTicks(hosts []string, ticks []lab.Tick) []classTick {
	var out []classTick
	prev := math.NaN()
	for _, t := range ticks {
		ct := classTick{t: t.T, dt: 0.1, lat: math.NaN()}
		if !math.IsNaN(prev) && t.T > prev {
			ct.dt = t.T - prev
		}
		prev = t.T
		var wait float64
		for _, h := range hosts {
			iv, ok := t.Dev[h]
			if !ok {
				continue
			}
			ct.ios += float64(iv.Reads + iv.Writes)
			ct.bytes += (iv.ReadBps + iv.WriteBps) * ct.dt
			if iv.Reads > 0 && !math.IsNaN(iv.ReadWaitMs) {
				wait += iv.ReadWaitMs * float64(iv.Reads)
			}
			if iv.Writes > 0 && !math.IsNaN(iv.WriteWaitMs) {
				wait += iv.WriteWaitMs * float64(iv.Writes)
			}
		}
		if ct.ios > 0 {
			ct.lat = wait / ct.ios
		}
		out = append(out, ct)
	}
	return out
}

// ComputeClassFigures computes a class's figures over ticks (a window of
// the trace) the way the agent does per tick: the members' IOPS and MB/s
// summed, their I/O-weighted wait, means over the window (latency weighted
// by I/Os), seed 004's metrics against the objectives.
func ComputeClassFigures(c LabSLOClass, ticks []lab.Tick) ClassFigures {
	f := ClassFigures{Name: c.Name, Members: []string{c.Host}, Priority: c.Priority, IOPSObjective: c.IOPS, MBsObjective: c.MBs,
		LatencyObjectiveMs: ms(c.Latency), BurstS: c.Burst.Seconds(),
		FioClatP50Ms: jf(math.NaN(), 0), FioClatP95Ms: jf(math.NaN(), 0)}
	var ios, bytes, secs, latSum float64
	var lats []float64
	for _, ct := range classTicks(f.Members, ticks) {
		secs += ct.dt
		ios += ct.ios
		bytes += ct.bytes
		if !math.IsNaN(ct.lat) {
			latSum += ct.lat * ct.ios
		}
		lats = append(lats, ct.lat)
	}
	iops, mbs, lat := math.NaN(), math.NaN(), math.NaN()
	if secs > 0 {
		iops, mbs = ios/secs, bytes/secs/1e6
	}
	if ios > 0 {
		lat = latSum / ios
	}
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
	f.Met = met(f.IOPSDeviationPct, f.ThroughputDeviationPct, f.LatencyDeviationMs)
	return f
}

// met: throughput no more than 5 % below its floors, latency at or below
// its ceiling, for the objectives set (NaN: none).
func met(iopsDev, tputDev, latDev agent.JSONFloat) bool {
	for _, d := range []agent.JSONFloat{iopsDev, tputDev} {
		if !math.IsNaN(float64(d)) && d < -5 {
			return false
		}
	}
	return !(float64(latDev) > 0)
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
		for k := range s.Classes {
			cs := &s.Classes[k]
			if cs.Name != c.Name {
				continue
			}
			if p0 == nil {
				p0 = cs
			}
			p1 = cs
			n++
			if cs.Missing {
				missing++
			}
			delay += cs.DelayMs
		}
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

// fioClatWindow reads fio's completion-latency log (100 ms averages,
// "t_ms, ns, ...") and returns the averages (ms) logged in (from, to].
func fioClatWindow(path string, from, to time.Duration) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Split(sc.Text(), ",")
		if len(fs) < 2 {
			return nil, fmt.Errorf("%s:%d: want \"t_ms, ns, …\"", path, line)
		}
		t, err1 := strconv.ParseFloat(strings.TrimSpace(fs[0]), 64)
		v, err2 := strconv.ParseFloat(strings.TrimSpace(fs[1]), 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s:%d: want numbers", path, line)
		}
		if t > float64(from.Milliseconds()) && t <= float64(to.Milliseconds()) {
			out = append(out, v/1e6)
		}
	}
	return out, sc.Err()
}

// sloAgentConfig is the agent's config for the slo-classes runs: the
// resource discovered from tgt, its policy and classes.
func (r *runner) sloAgentConfig(path, backend, http string, burstScale float64) error {
	var b strings.Builder
	// max_delay 50ms: best effort should give way as far as the classes
	// need; at the default 20 ms the bulk writer still held the disk a
	// fifth of the time and power's 10 ms was just missed.
	fmt.Fprintf(&b, "backend: %s\nhttp: %s\nthreshold: 15ms\nmax_delay: %v\ndiscovery:\n  source: tgt\n  tgt_control_port: %d\nresources:\n  - name: %s\n    policy: slo-classes\n",
		backend, http, sloMaxDelay, lab.TgtdPort, r.Res.Name)
	// Each initiator has its own LUN on the one target, but tgt lets every
	// initiator reach every LUN: without consumer_devices every class
	// would be measured on all four.
	b.WriteString(r.consumerDevicesYAML())
	b.WriteString("    classes:\n")
	for _, c := range SLOLabClasses {
		burst := time.Duration(float64(c.Burst) * burstScale).Round(time.Millisecond)
		fmt.Fprintf(&b, "      - {name: %s, members: [%s], priority: %d, iops: %v, mb_s: %v, latency: %v, burst: %v}\n",
			c.Name, lab.HostAddr(c.Host), c.Priority, c.IOPS, c.MBs, c.Latency, burst)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// SLORun is one run (agent off or policy on) of slo-classes.
type SLORun struct {
	Name    string         `json:"name"`
	Policy  string         `json:"policy"` // "none": agent off (a dry-run agent only watched)
	Classes []ClassFigures `json:"classes"`
	// BulkMBs is the bulk writer's (best effort) write rate.
	BulkMBs float64         `json:"bulk_write_mb_s"`
	TCP     lab.TCPCounters `json:"tcp"`
}

// SLOClassesSummary is summary.json of slo-classes.
type SLOClassesSummary struct {
	Experiment  string          `json:"experiment"`
	Scale       float64         `json:"scale"`
	ThresholdMs float64         `json:"threshold_ms"`
	MaxDelayMs  float64         `json:"max_delay_ms"`
	Runs        []SLORun        `json:"runs"`
	Burst       BurstFigures    `json:"burst"`
	Retrans     uint64          `json:"retransmits"`
	TCP         lab.TCPCounters `json:"tcp"`
}

// sloJobs are the classes reading at their objective rates and the bulk
// writer, all for length.
func (r *runner) sloJobs(length time.Duration, skip string) []lab.Job {
	var jobs []lab.Job
	for _, c := range SLOLabClasses {
		if c.Name == skip {
			continue
		}
		jobs = append(jobs, lab.Job{Name: c.Name, Host: c.Host, URL: r.LUN(c.Host).URL, RW: "randread", BS: sloBS, Rate: int(c.MBs * 1e6), Runtime: length})
	}
	size := r.State.Options.LUNSize / sloBulkThreads / 65536 * 65536
	return append(jobs, lab.Job{Name: "bulk", Host: sloBulkHost, URL: r.LUN(sloBulkHost).URL, RW: "write", BS: 64 << 10, NumJobs: sloBulkThreads, Runtime: length, Size: size})
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
			if v, err := fioClatWindow(filepath.Join(fioDir, c.Host+"_clat.1.log"), res.Phase.From, res.Phase.To); err == nil && len(v) > 0 {
				d := report.Describe(v)
				f.FioClatP50Ms, f.FioClatP95Ms = jf(d.P50, 3), jf(d.P95, 3)
			}
		}
		f.Agent = AgentFigures(c, polls, res.Phase.From, res.Phase.To)
		run.Classes = append(run.Classes, f)
	}
	run.BulkMBs = round(report.Aggregate(w, []string{sloBulkHost}, writeMBs), 2)
	return run
}

func runSLOClassesLab(r *runner) (any, error) {
	sc := r.Scale
	lead, length := sc(10*time.Second), sc(60*time.Second)
	sum := SLOClassesSummary{Experiment: "slo-classes", Scale: r.opts.Scale, ThresholdMs: 15, MaxDelayMs: ms(sloMaxDelay)}
	var all []*lab.PhaseResult
	var latSeries, iopsSeries []report.Series
	for i, run := range []struct{ name, policy, backend string }{{"agent-off", "none", "dry-run"}, {"slo-classes", "slo-classes", "delayline"}} {
		cfg := filepath.Join(r.Dir, fmt.Sprintf("agent-%s.yaml", run.name))
		// With the agent off, a dry-run agent (it acts on nothing) still
		// keeps the classes' accounting, so both runs have the agent's
		// figures beside the independent ones.
		if err := r.sloAgentConfig(cfg, run.backend, fmt.Sprintf("127.0.0.1:%d", 9311+i), r.opts.Scale); err != nil {
			return nil, err
		}
		// Short agent names: the delay line's classifier label is
		// "sanqos-lab-NAME-dl", at most 20 characters.
		a, err := lab.StartAgentNamed(fmt.Sprintf("slo%d", i), run.backend, r.Dir, "--config", cfg)
		if err != nil {
			return nil, err
		}
		p := &lab.Phase{Name: run.name, Label: run.name, Length: length, From: lead, To: length - sc(time.Second), Jobs: r.sloJobs(length, "")}
		res, polls, err := r.runPolled(p, a, length)
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		sum.Runs = append(sum.Runs, SummarizeSLORun(run.name, run.policy, res, polls, filepath.Join(r.Dir, p.Name+".r0")))
		for _, c := range SLOLabClasses {
			x, y := classSeries(res.Ticks, c.Host, func(ct classTick) float64 { return ct.lat })
			latSeries = append(latSeries, report.Series{Name: c.Name + " " + run.name, X: x, Y: smooth(y)})
			x, y = classSeries(res.Ticks, c.Host, func(ct classTick) float64 { return ct.ios / ct.dt })
			iopsSeries = append(iopsSeries, report.Series{Name: c.Name + " " + run.name, X: x, Y: smooth(y)})
		}
	}
	burst, bres, polls, err := r.runSLOBurst()
	if err != nil {
		return nil, err
	}
	all = append(all, bres)
	sum.Burst = burst
	sum.TCP = sumTCP(all)
	sum.Retrans = sum.TCP.RetransSegs
	var latRefs, iopsRefs []report.Line
	for _, c := range SLOLabClasses {
		latRefs = append(latRefs, report.Line{Name: c.Name + " objective", Y: ms(c.Latency)})
		iopsRefs = append(iopsRefs, report.Line{Name: c.Name + " objective", Y: c.IOPS})
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "class-latency.png"), "slo-classes: each class's I/O wait (diskstats) vs its objective, agent off and on",
		"time (s)", "wait (ms, EWMA 0.15)", latSeries, latRefs); err != nil {
		return sum, err
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "class-iops.png"), "slo-classes: each class's IOPS vs its objective, agent off and on",
		"time (s)", "IOPS (EWMA 0.15)", iopsSeries, iopsRefs); err != nil {
		return sum, err
	}
	return sum, plotBurst(filepath.Join(r.Dir, "credits.png"), bres, polls, burst)
}

// classSeries is f of one host's class ticks over a phase.
func classSeries(ticks []lab.Tick, host string, f func(classTick) float64) (x, y []float64) {
	for _, ct := range classTicks([]string{host}, ticks) {
		x = append(x, ct.t)
		y = append(y, f(ct))
	}
	return x, y
}

// --- weighted ---

// --- important-sets ---
