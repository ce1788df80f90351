package experiments

import (
	"bufio"
	"encoding/json"
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
	"github.com/sanqos/sanqos/sample"
)

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

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// StatusSample is one poll of the agent's status during a phase: what
// status.jsonl holds, one per line.
type StatusSample struct {
	Phase   string              `json:"phase"`
	T       float64             `json:"t_s"`
	Classes []agent.ClassStatus `json:"classes,omitempty"`
	// Delays are the write and read delays the agent applied, ms, by
	// consumer address.
	WriteDelayMs map[string]float64 `json:"write_delay_ms,omitempty"`
	ReadDelayMs  map[string]float64 `json:"read_delay_ms,omitempty"`
	// IndicatorMs is the resource's smoothed read wait.
	IndicatorMs agent.JSONFloat `json:"indicator_ms"`
}

// statusPoller returns events that poll the agent's status every 500 ms
// of a phase into *out.
func statusPoller(a *lab.LabAgent, phase string, length time.Duration, out *[]StatusSample) []lab.Event {
	var ev []lab.Event
	for t := 500 * time.Millisecond; t < length; t += 500 * time.Millisecond {
		t := t
		ev = append(ev, lab.Event{At: t, Name: "poll status", Do: func() error {
			var st agent.Status
			if err := a.Status(&st); err != nil {
				return err
			}
			s := StatusSample{Phase: phase, T: t.Seconds(), WriteDelayMs: map[string]float64{}, ReadDelayMs: map[string]float64{}}
			if len(st.Resources) > 0 {
				s.Classes = st.Resources[0].Classes
				s.IndicatorMs = agent.JSONFloat(st.Resources[0].IndicatorMs)
			}
			for k, v := range st.Throttles {
				if v.WriteDelay > 0 {
					s.WriteDelayMs[k] = ms(v.WriteDelay)
				}
				if v.ReadDelay > 0 {
					s.ReadDelayMs[k] = ms(v.ReadDelay)
				}
			}
			*out = append(*out, s)
			return nil
		}})
	}
	return ev
}

// writeStatusLog appends samples to dir/status.jsonl.
// runPolled runs phase p while polling agent a's status (nil: no agent,
// no polls), stops a, and appends the polls to the run's status log.
func (r *runner) runPolled(p *lab.Phase, a *lab.LabAgent, length time.Duration) (*lab.PhaseResult, []StatusSample, error) {
	var polls []StatusSample
	if a != nil {
		p.Events = append(p.Events, statusPoller(a, p.Name, length, &polls)...)
	}
	res, err := r.Run(p, 0)
	if a != nil {
		if serr := a.Stop(); err == nil {
			err = serr
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if err := writeStatusLog(r.Dir, polls); err != nil {
		return nil, nil, err
	}
	return res, polls, nil
}

// startConfigured writes config text to file in the run directory and
// starts a delay-line agent called name on it.
func (r *runner) startConfigured(file, config, name string) (*lab.LabAgent, error) {
	cfg := filepath.Join(r.Dir, file)
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return lab.StartAgentNamed(name, "delayline", r.Dir, "--config", cfg)
}

func writeStatusLog(dir string, samples []StatusSample) error {
	f, err := os.OpenFile(filepath.Join(dir, "status.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// LoadStatusLog reads status.jsonl back, by phase.
func LoadStatusLog(path string) (map[string][]StatusSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]StatusSample{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var s StatusSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out[s.Phase] = append(out[s.Phase], s)
	}
	return out, sc.Err()
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

// consumerDevicesYAML maps each initiator to its own LUN's device.
func (r *runner) consumerDevicesYAML() string {
	var b strings.Builder
	b.WriteString("    consumer_devices:\n")
	for _, h := range lab.Hosts {
		fmt.Fprintf(&b, "      %s: [%s]\n", lab.HostAddr(h), r.LUN(h).Loop)
	}
	return b.String()
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

// BurstFigures show one class's burst allowance: credit banked below its
// objective, spent above it, and what the policy did once it was gone.
type BurstFigures struct {
	Class  string  `json:"class"`
	BurstS float64 `json:"burst_s"`
	// The class ran at LowRatio × its objective from LowFromS, then at
	// BurstRatio × from BurstFromS to BurstToS.
	LowRatio   float64 `json:"low_ratio"`
	BurstRatio float64 `json:"burst_ratio"`
	LowFromS   float64 `json:"low_from_s"`
	BurstFromS float64 `json:"burst_from_s"`
	BurstToS   float64 `json:"burst_to_s"`
	// CreditAtBurstS is the credit the agent reported when the burst
	// began (at most BurstS).
	CreditAtBurstS float64 `json:"credit_at_burst_s"`
	// AllowanceS is how long into the burst the class ran before the
	// agent first flagged it exceeding; ExpectedAllowanceS is
	// credit / (attained ratio − 1), what the credit should buy.
	AllowanceS         agent.JSONFloat `json:"allowance_s"`
	ExpectedAllowanceS agent.JSONFloat `json:"expected_allowance_s"`
	// The class's IOPS (diskstats) and the delay the agent put on it,
	// while it had credit and after.
	IOPSWithCredit     agent.JSONFloat `json:"iops_with_credit"`
	IOPSAfterCredit    agent.JSONFloat `json:"iops_after_credit"`
	DelayWithCreditMs  float64         `json:"delay_with_credit_ms"`
	DelayAfterCreditMs float64         `json:"delay_after_credit_ms"`
	// Classes are every class's figures over the burst (from BurstFromS).
	Classes []ClassFigures `json:"classes"`
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

// The burst phase's plan: the knowledge class reads at half its objective
// (banking credit), then at three times it (spending it), with the other
// classes and the bulk writer as in the main phase.
const (
	burstLowRatio  = 0.5
	burstHighRatio = 3
	burstClass     = "knowledge"
)

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

// runSLOBurst runs the burst phase under the policy.
func (r *runner) runSLOBurst() (BurstFigures, *lab.PhaseResult, []StatusSample, error) {
	sc := r.Scale
	low, high, tail := sc(25*time.Second), sc(20*time.Second), sc(5*time.Second)
	length := low + high + tail
	cfg := filepath.Join(r.Dir, "agent-burst.yaml")
	if err := r.sloAgentConfig(cfg, "delayline", "127.0.0.1:9313", r.opts.Scale); err != nil {
		return BurstFigures{}, nil, nil, err
	}
	a, err := lab.StartAgentNamed("burst", "delayline", r.Dir, "--config", cfg)
	if err != nil {
		return BurstFigures{}, nil, nil, err
	}
	var cl LabSLOClass
	for _, c := range SLOLabClasses {
		if c.Name == burstClass {
			cl = c
		}
	}
	jobs := r.sloJobs(length, burstClass)
	url := r.LUN(cl.Host).URL
	jobs = append(jobs,
		lab.Job{Name: "low", Host: cl.Host, URL: url, RW: "randread", BS: sloBS, Rate: int(burstLowRatio * cl.MBs * 1e6), Runtime: low},
		lab.Job{Name: "burst", Host: cl.Host, URL: url, RW: "randread", BS: sloBS, Rate: int(burstHighRatio * cl.MBs * 1e6), Start: low, Runtime: high},
		lab.Job{Name: cl.Name, Host: cl.Host, URL: url, RW: "randread", BS: sloBS, Rate: int(cl.MBs * 1e6), Start: low + high, Runtime: tail})
	p := &lab.Phase{Name: "burst", Label: fmt.Sprintf("%s at %.1f× then %.0f× its objective", cl.Name, burstLowRatio, float64(burstHighRatio)),
		Length: length, From: low, To: low + high, Jobs: jobs}
	res, polls, err := r.runPolled(p, a, length)
	if err != nil {
		return BurstFigures{}, nil, nil, err
	}
	return SummarizeBurst(cl, r.opts.Scale, res, polls, low, low+high), res, polls, nil
}

// SummarizeBurst computes the burst figures of class c (its burst scaled
// by scale, as the agent was configured) from the burst phase's trace and
// polls; the burst ran over (from, to].
func SummarizeBurst(c LabSLOClass, scale float64, res *lab.PhaseResult, polls []StatusSample, from, to time.Duration) BurstFigures {
	b := BurstFigures{Class: c.Name, BurstS: report.Round(c.Burst.Seconds()*scale, 3), LowRatio: burstLowRatio, BurstRatio: burstHighRatio,
		BurstFromS: from.Seconds(), BurstToS: to.Seconds(), AllowanceS: jf(math.NaN(), 0), ExpectedAllowanceS: jf(math.NaN(), 0),
		IOPSWithCredit: jf(math.NaN(), 0), IOPSAfterCredit: jf(math.NaN(), 0)}
	find := func(s StatusSample) *agent.ClassStatus {
		for k := range s.Classes {
			if s.Classes[k].Name == c.Name {
				return &s.Classes[k]
			}
		}
		return nil
	}
	// The credit when the burst began: the last poll before it.
	exceedAt := math.NaN()
	var dWith, dAfter float64
	var nWith, nAfter int
	for _, s := range polls {
		cs := find(s)
		if cs == nil {
			continue
		}
		switch {
		case s.T <= from.Seconds():
			b.CreditAtBurstS = report.Round(cs.CreditS, 3)
		case s.T <= to.Seconds():
			if cs.Exceeding && math.IsNaN(exceedAt) {
				exceedAt = s.T
			}
			if math.IsNaN(exceedAt) {
				dWith += cs.DelayMs
				nWith++
			} else {
				dAfter += cs.DelayMs
				nAfter++
			}
		}
	}
	if nWith > 0 {
		b.DelayWithCreditMs = report.Round(dWith/float64(nWith), 2)
	}
	if nAfter > 0 {
		b.DelayAfterCreditMs = report.Round(dAfter/float64(nAfter), 2)
	}
	split := to
	if !math.IsNaN(exceedAt) {
		b.AllowanceS = jf(exceedAt-from.Seconds(), 2)
		split = time.Duration(exceedAt * float64(time.Second))
	}
	cf := c
	cf.Burst = time.Duration(float64(c.Burst) * scale)
	withF := ComputeClassFigures(cf, res.Between(from, split))
	b.IOPSWithCredit = withF.IOPS
	if split < to {
		b.IOPSAfterCredit = ComputeClassFigures(cf, res.Between(split, to)).IOPS
	}
	if r := float64(withF.IOPS) / c.IOPS; r > 1 {
		b.ExpectedAllowanceS = jf(b.CreditAtBurstS/(r-1), 2)
	}
	for _, k := range SLOLabClasses {
		k.Burst = time.Duration(float64(k.Burst) * scale)
		f := ComputeClassFigures(k, res.Between(from, to))
		f.Agent = AgentFigures(k, polls, from, to)
		b.Classes = append(b.Classes, f)
	}
	return b
}

// plotBurst draws the burst phase: every class's credit from the agent,
// and the bursting class's IOPS ratio to its objective.
func plotBurst(path string, res *lab.PhaseResult, polls []StatusSample, b BurstFigures) error {
	var series []report.Series
	for _, c := range SLOLabClasses {
		s := report.Series{Name: c.Name + " credit (s)"}
		for _, p := range polls {
			for _, cs := range p.Classes {
				if cs.Name == c.Name {
					s.X, s.Y = append(s.X, p.T), append(s.Y, cs.CreditS)
				}
			}
		}
		series = append(series, s)
		if c.Name == b.Class {
			x, y := classSeries(res.Ticks, c.Host, func(ct classTick) float64 { return ct.ios / ct.dt / c.IOPS })
			series = append(series, report.Series{Name: c.Name + " IOPS / objective", X: x, Y: smooth(y)})
			d := report.Series{Name: c.Name + " delay (10 ms)"}
			for _, p := range polls {
				for _, cs := range p.Classes {
					if cs.Name == c.Name {
						d.X, d.Y = append(d.X, p.T), append(d.Y, cs.DelayMs/10)
					}
				}
			}
			series = append(series, d)
		}
	}
	return report.TimePlot(path, fmt.Sprintf("slo-classes burst: %s banks credit at %.1f×, spends it at %.0f× its objective", b.Class, b.LowRatio, b.BurstRatio),
		"time (s)", "credit (s) / ratio / delay (10 ms)", series, []report.Line{{Name: "objective (ratio 1)", Y: 1}})
}

// --- weighted ---

// WeightedHosts are the weighted experiment's consumers and weights: the
// small reader on b2 (weight 1; its wait drives the controller) and three
// sequential writers 4:2:1.
var WeightedHosts = []struct {
	Host   string
	Weight float64
}{{"b2", 1}, {"b3", 4}, {"b4", 2}, {"b5", 1}}

// weightedWriterThreads is each writer's threads (12 in all, the thesis'
// heavy load).
const weightedWriterThreads = 4

// WeightedShare is one consumer's share in one run.
type WeightedShare struct {
	Host   string  `json:"host"`
	Weight float64 `json:"weight"`
	MBs    float64 `json:"mb_s"`
	// Share is its fraction of all consumers' bytes; TargetShare its
	// weight's fraction (what the policy aims at under saturation).
	Share       float64 `json:"share"`
	TargetShare float64 `json:"target_share"`
	// DeviationPct is eq. (1) on the share: (share − target)/target × 100.
	DeviationPct float64 `json:"deviation_pct"`
	// WriterShare and WriterTarget are the same among the writers only.
	WriterShare  float64 `json:"writer_share,omitempty"`
	WriterTarget float64 `json:"writer_target,omitempty"`
	// MeanDelayMs is the delay the agent applied to it (its status polls).
	MeanDelayMs float64 `json:"mean_delay_ms"`
}

// WeightedRun is one run of weighted.
type WeightedRun struct {
	Name       string          `json:"name"`
	Policy     string          `json:"policy"`
	MaxDelayMs float64         `json:"max_delay_ms,omitempty"`
	Shares     []WeightedShare `json:"shares"`
	TotalMBs   float64         `json:"total_mb_s"`
	ReadWaitMs report.Dist     `json:"read_wait_ms"`
	// AtMaxDelayPct is the share of polls in which the lightest writer's
	// delay was at max_delay: the ceiling, not the policy, limits it.
	AtMaxDelayPct float64         `json:"at_max_delay_pct"`
	TCP           lab.TCPCounters `json:"tcp"`
}

// WeightedSummary is summary.json of weighted.
type WeightedSummary struct {
	Experiment  string          `json:"experiment"`
	Scale       float64         `json:"scale"`
	ThresholdMs float64         `json:"threshold_ms"`
	Runs        []WeightedRun   `json:"runs"`
	Retrans     uint64          `json:"retransmits"`
	TCP         lab.TCPCounters `json:"tcp"`
}

func bytesRate(iv sample.Interval) float64 { return iv.ReadBps + iv.WriteBps }

// SummarizeWeightedRun computes a run's shares from its trace window and
// the agent's polls (none with the agent off).
func SummarizeWeightedRun(name, policy string, maxDelay time.Duration, res *lab.PhaseResult, polls []StatusSample) WeightedRun {
	run := WeightedRun{Name: name, Policy: policy, MaxDelayMs: ms(maxDelay), TCP: res.TCP}
	w := res.Window()
	var total, wsum, wtotal, wwsum float64
	rate := map[string]float64{}
	for i, h := range WeightedHosts {
		rate[h.Host] = report.Aggregate(w, []string{h.Host}, bytesRate)
		total += rate[h.Host]
		wsum += h.Weight
		if i > 0 {
			wtotal += rate[h.Host]
			wwsum += h.Weight
		}
	}
	last := WeightedHosts[len(WeightedHosts)-1].Host
	var atMax, n int
	for _, p := range polls {
		if p.T <= res.Phase.From.Seconds() || p.T > res.Phase.To.Seconds() {
			continue
		}
		n++
		if maxDelay > 0 && p.WriteDelayMs[lab.HostAddr(last).String()] >= ms(maxDelay) {
			atMax++
		}
	}
	if n > 0 {
		run.AtMaxDelayPct = round(100*float64(atMax)/float64(n), 1)
	}
	for i, h := range WeightedHosts {
		s := WeightedShare{Host: h.Host, Weight: h.Weight, MBs: round(rate[h.Host]/1e6, 3),
			TargetShare: round(h.Weight/wsum, 3)}
		if total > 0 {
			s.Share = round(rate[h.Host]/total, 3)
			s.DeviationPct = round((rate[h.Host]/total-h.Weight/wsum)/(h.Weight/wsum)*100, 1)
		}
		if i > 0 && wtotal > 0 {
			s.WriterShare, s.WriterTarget = round(rate[h.Host]/wtotal, 3), round(h.Weight/wwsum, 3)
		}
		var d float64
		var k int
		for _, p := range polls {
			if p.T > res.Phase.From.Seconds() && p.T <= res.Phase.To.Seconds() {
				d += p.WriteDelayMs[lab.HostAddr(h.Host).String()] + p.ReadDelayMs[lab.HostAddr(h.Host).String()]
				k++
			}
		}
		if k > 0 {
			s.MeanDelayMs = round(d/float64(k), 2)
		}
		run.Shares = append(run.Shares, s)
	}
	run.TotalMBs = round(total/1e6, 2)
	run.ReadWaitMs = roundDist(report.Describe(report.Values(w, "b2", readWait)))
	return run
}

func runWeightedLab(r *runner) (any, error) {
	sc := r.Scale
	lead, length := sc(10*time.Second), sc(60*time.Second)
	sum := WeightedSummary{Experiment: "weighted", Scale: r.opts.Scale, ThresholdMs: 15}
	var all []*lab.PhaseResult
	for _, run := range []struct {
		name     string
		maxDelay time.Duration
	}{{"agent-off", 0}, {"weighted-20ms", 20 * time.Millisecond}, {"weighted-50ms", 50 * time.Millisecond}} {
		p := &lab.Phase{Name: run.name, Label: run.name, Length: length, From: lead, To: length - sc(time.Second)}
		p.Jobs = []lab.Job{r.reader(length)}
		for _, h := range WeightedHosts[1:] {
			p.Jobs = append(p.Jobs, lab.Job{Name: "writer", Host: h.Host, URL: r.LUN(h.Host).URL, RW: "write", BS: 64 << 10, NumJobs: weightedWriterThreads,
				Runtime: length, Size: r.State.Options.LUNSize / weightedWriterThreads / 65536 * 65536})
		}
		var a *lab.LabAgent
		policy := "none"
		if run.maxDelay > 0 {
			policy = "weighted"
			var b strings.Builder
			fmt.Fprintf(&b, "backend: delayline\nhttp: 127.0.0.1:9311\nthreshold: 15ms\nmax_delay: %v\ndiscovery:\n  source: tgt\n  tgt_control_port: %d\nresources:\n  - name: %s\n    policy: weighted\n    weights:\n",
				run.maxDelay, lab.TgtdPort, r.Res.Name)
			for _, h := range WeightedHosts {
				fmt.Fprintf(&b, "      %s: %v\n", lab.HostAddr(h.Host), h.Weight)
			}
			var err error
			if a, err = r.startConfigured("agent-"+run.name+".yaml", b.String(), fmt.Sprintf("w%d", run.maxDelay.Milliseconds())); err != nil {
				return nil, err
			}
		}
		res, polls, err := r.runPolled(p, a, length)
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		wr := SummarizeWeightedRun(run.name, policy, run.maxDelay, res, polls)
		sum.Runs = append(sum.Runs, wr)
		name := "shares-" + run.name + ".png"
		if err := plotShares(filepath.Join(r.Dir, name), res, wr); err != nil {
			return sum, err
		}
	}
	sum.TCP = sumTCP(all)
	sum.Retrans = sum.TCP.RetransSegs
	return sum, nil
}

// plotShares draws each writer's share of the writers' bytes per second
// against its weighted target.
func plotShares(path string, res *lab.PhaseResult, run WeightedRun) error {
	var series []report.Series
	var refs []report.Line
	writers := []string{}
	for _, h := range WeightedHosts[1:] {
		writers = append(writers, h.Host)
	}
	for _, s := range run.Shares[1:] {
		var x, y []float64
		// One-second bins: 100 ms shares of 64 KiB writers are mostly noise.
		for from := 0.0; from < res.Phase.Length.Seconds(); from++ {
			ticks := res.Between(time.Duration(from*float64(time.Second)), time.Duration((from+1)*float64(time.Second)))
			all := report.Aggregate(ticks, writers, bytesRate) * float64(len(ticks))
			mine := report.Aggregate(ticks, []string{s.Host}, bytesRate) * float64(len(ticks))
			if len(ticks) == 0 || all == 0 {
				continue
			}
			x, y = append(x, from+1), append(y, mine/all)
		}
		series = append(series, report.Series{Name: fmt.Sprintf("%s (weight %v)", s.Host, s.Weight), X: x, Y: y})
		refs = append(refs, report.Line{Name: fmt.Sprintf("%s target %.3f", s.Host, s.WriterTarget), Y: s.WriterTarget})
	}
	return report.TimePlot(path, fmt.Sprintf("weighted (%s): each writer's share of the writers' bytes vs its target", run.Name),
		"time (s)", "share (1 s bins)", series, refs)
}

// --- important-sets ---

// ImportantRun is one run of important-sets.
type ImportantRun struct {
	Name   string `json:"name"`
	Policy string `json:"policy"`
	// ImportantWaitMs is the important reader's (b2) read wait; OtherWaitMs
	// the unprotected reader's (b3).
	ImportantWaitMs report.Dist `json:"important_read_wait_ms"`
	OtherWaitMs     report.Dist `json:"other_read_wait_ms"`
	OtherReadMBs    float64     `json:"other_read_mb_s"`
	WriteMBs        float64     `json:"write_mb_s"`
	// IndicatorMs is the agent's smoothed indicator (its polls), and
	// MeanDelayMs the write delay it applied to the writers.
	IndicatorMs float64 `json:"indicator_ms"`
	MeanDelayMs float64 `json:"mean_write_delay_ms"`
	// MeanMet: the important reader's mean wait within 1.1 × the
	// threshold (the objective the controller holds, "mean"); ThresholdMet:
	// its p95 within 1.25 × (the tail, which the 31 ms large reads set).
	MeanMet      bool            `json:"important_mean_within_1_1x_threshold"`
	ThresholdMet bool            `json:"important_p95_within_1_25x_threshold"`
	TCP          lab.TCPCounters `json:"tcp"`
}

// ImportantSummary is summary.json of important-sets.
type ImportantSummary struct {
	Experiment  string         `json:"experiment"`
	Scale       float64        `json:"scale"`
	ThresholdMs float64        `json:"threshold_ms"`
	Runs        []ImportantRun `json:"runs"`
	// WriteGainPct is how much more the writers moved under
	// important-sets than under read-over-write.
	WriteGainPct float64         `json:"write_gain_pct_vs_read_over_write"`
	Retrans      uint64          `json:"retransmits"`
	TCP          lab.TCPCounters `json:"tcp"`
}

// SummarizeImportantRun computes a run's figures from its trace window
// and the agent's polls.
func SummarizeImportantRun(name, policy string, thrMs float64, res *lab.PhaseResult, polls []StatusSample) ImportantRun {
	w := res.Window()
	run := ImportantRun{Name: name, Policy: policy, TCP: res.TCP,
		ImportantWaitMs: roundDist(report.Describe(report.Values(w, "b2", readWait))),
		OtherWaitMs:     roundDist(report.Describe(report.Values(w, "b3", readWait))),
		OtherReadMBs:    round(report.Aggregate(w, []string{"b3"}, readMBs), 2),
		WriteMBs:        round(report.Aggregate(w, []string{"b4", "b5"}, writeMBs), 2)}
	var ind, delay float64
	var n, nd int
	for _, p := range polls {
		if p.T <= res.Phase.From.Seconds() || p.T > res.Phase.To.Seconds() {
			continue
		}
		if v := float64(p.IndicatorMs); !math.IsNaN(v) {
			ind += v
			n++
		}
		for _, h := range []string{"b4", "b5"} {
			delay += p.WriteDelayMs[lab.HostAddr(h).String()]
			nd++
		}
	}
	if n > 0 {
		run.IndicatorMs = round(ind/float64(n), 2)
	}
	if nd > 0 {
		run.MeanDelayMs = round(delay/float64(nd), 2)
	}
	run.ThresholdMet = run.ImportantWaitMs.N > 0 && run.ImportantWaitMs.P95 <= 1.25*thrMs
	run.MeanMet = run.ImportantWaitMs.N > 0 && run.ImportantWaitMs.Mean <= 1.1*thrMs
	return run
}

func runImportantSets(r *runner) (any, error) {
	sc := r.Scale
	lead, length := sc(10*time.Second), sc(60*time.Second)
	const thr = 15 * time.Millisecond
	sum := ImportantSummary{Experiment: "important-sets", Scale: r.opts.Scale, ThresholdMs: ms(thr)}
	var all []*lab.PhaseResult
	var series, wseries []report.Series
	for _, policy := range []string{"none", "read-over-write", "important-sets"} {
		p := &lab.Phase{Name: policy, Label: policy, Length: length, From: lead, To: length - sc(time.Second)}
		if policy == "none" {
			p.Name, p.Label = "agent-off", "agent off"
		}
		// b2: the thesis' small reader, important. b3: a second reader,
		// not important: 1 MiB random reads at 6 MB/s, each 31 ms of
		// service on the modelled disk, so its wait is ~26 ms above b2's
		// whatever the writers do (all share one queue) and lifts the
		// whole resource's I/O-weighted read wait by ~4 ms. b4, b5: four
		// sequential writers each.
		p.Jobs = []lab.Job{r.reader(length), {Name: "other", Host: "b3", URL: r.LUN("b3").URL, RW: "randread", BS: 1 << 20, Rate: 6e6, Runtime: length}}
		for _, h := range []string{"b4", "b5"} {
			p.Jobs = append(p.Jobs, lab.Job{Name: "writer", Host: h, URL: r.LUN(h).URL, RW: "write", BS: 64 << 10, NumJobs: 4, Runtime: length,
				Size: r.State.Options.LUNSize / 4 / 65536 * 65536})
		}
		var a *lab.LabAgent
		if policy != "none" {
			var b strings.Builder
			fmt.Fprintf(&b, "backend: delayline\nhttp: 127.0.0.1:9311\nthreshold: %v\ndiscovery:\n  source: tgt\n  tgt_control_port: %d\nresources:\n  - name: %s\n    policy: %s\n    important: [%s]\n%s",
				thr, lab.TgtdPort, r.Res.Name, policy, lab.HostAddr("b2"), r.consumerDevicesYAML())
			var err error
			if a, err = r.startConfigured("agent-"+policy+".yaml", b.String(), map[string]string{"read-over-write": "row", "important-sets": "imp"}[policy]); err != nil {
				return nil, err
			}
		}
		res, polls, err := r.runPolled(p, a, length)
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		run := SummarizeImportantRun(p.Name, policy, ms(thr), res, polls)
		sum.Runs = append(sum.Runs, run)
		x, y := res.Series("b2", readWait)
		series = append(series, report.Series{Name: p.Label, X: x, Y: smooth(y)})
		wx, wy := report.AggregateSeries(res.Ticks, []string{"b4", "b5"}, writeMBs)
		wseries = append(wseries, report.Series{Name: p.Label, X: wx, Y: smooth(wy)})
	}
	if row := sum.Runs[1].WriteMBs; row > 0 {
		sum.WriteGainPct = round((sum.Runs[2].WriteMBs-row)/row*100, 1)
	}
	sum.TCP = sumTCP(all)
	sum.Retrans = sum.TCP.RetransSegs
	if err := report.TimePlot(filepath.Join(r.Dir, "important-wait.png"), "important-sets: the important reader's wait (b2)",
		"time (s)", "read wait (ms, EWMA 0.15)", series, []report.Line{{Name: "threshold", Y: ms(thr)}}); err != nil {
		return sum, err
	}
	return sum, report.TimePlot(filepath.Join(r.Dir, "important-writes.png"), "important-sets: the 8 writers' aggregate rate",
		"time (s)", "MB/s (EWMA 0.15)", wseries, nil)
}
