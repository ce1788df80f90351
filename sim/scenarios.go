package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// Options control a scenario run.
type Options struct {
	Seed   uint64
	Scale  float64 // durations = thesis' × Scale
	Params Params
	// AgentYAML is extra agent config (e.g. a tuned `pid:` block), as the
	// lab's --agent-yaml.
	AgentYAML  string
	Thresholds []time.Duration
	Out        string // run directory ("" = no files)
}

// DefaultOptions are the thesis' durations (scale 1; the simulator can
// afford them) with the default model.
func DefaultOptions() Options {
	return Options{Seed: 1, Scale: 1, Params: DefaultParams()}
}

func (o Options) scale(d time.Duration) time.Duration { return time.Duration(float64(d) * o.Scale) }

// Scenario is a named simulated experiment.
type Scenario struct {
	Name, Title string
	Run         func(o Options) (any, error)
}

// Scenarios are the lab's experiments the simulator mirrors, plus scale.
var Scenarios = map[string]*Scenario{}

func register(s *Scenario) { Scenarios[s.Name] = s }

// Names lists the scenarios, sorted.
func Names() []string {
	var n []string
	for k := range Scenarios {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func init() {
	register(&Scenario{Name: "interference", Title: "8 KiB random reader at 256 KiB/s vs 0/1/3/12 sequential writers (Fig 5.7)", Run: runInterference})
	register(&Scenario{Name: "pid", Title: "PID with given sets holds 10/15/20 ms under 12 writers toggled on/off (Fig 5.9/5.10)",
		Run: func(o Options) (any, error) { return runControlled(o, false) }})
	register(&Scenario{Name: "autonomic", Title: "Same load, sets and indicators discovered automatically (Fig 5.11–5.13)",
		Run: func(o Options) (any, error) { return runControlled(o, true) }})
	register(&Scenario{Name: "delay-sweep", Title: "one 64 KiB stream's rate vs added delay 0–9.6 ms (Fig 5.5/5.6)", Run: runDelaySweep})
}

// Run runs a scenario and, with o.Out set, writes summary.json,
// trace.csv (where the scenario has one) and plots there.
func Run(name string, o Options) (any, error) {
	s := Scenarios[name]
	if s == nil {
		return nil, fmt.Errorf("no scenario %q (have %s)", name, strings.Join(Names(), ", "))
	}
	if o.Scale <= 0 || o.Scale > 10 {
		return nil, fmt.Errorf("scale %v: want (0, 10]", o.Scale)
	}
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return nil, err
		}
	}
	sum, err := s.Run(o)
	if err != nil {
		return nil, err
	}
	if o.Out != "" {
		b, err := MarshalSummary(sum)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(o.Out, "summary.json"), b, 0o644); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// MarshalSummary is summary.json's exact bytes (as the lab writes them).
func MarshalSummary(sum any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sum); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// labResources is the lab's one resource (vg1) and its LUNs.
func labPhase(name, label string, length, from, to time.Duration) *Phase {
	p := &Phase{Name: name, Label: label, Length: length, From: from, To: to,
		Resources: []Resource{{Name: "vg1", Devices: Devices}}, Hosts: map[string]string{}}
	for i, h := range Hosts {
		p.Hosts[Devices[i]] = h
	}
	return p
}

// reader is the thesis' smalljob: 8 KiB random reads at 256 KiB/s from b2.
func reader(length time.Duration) *Job {
	return &Job{Name: "smalljob", Consumer: HostAddr("b2"), Device: "loop0", Random: true, BS: 8 << 10, IODepth: 1, RateBps: 256 << 10, Length: length}
}

// writers spreads n sequential 64 KiB writer threads over b3..b5 as the
// lab does (fio's libiscsi engine: one I/O in flight per thread).
func writers(n int, start, length, off time.Duration) []*Job {
	var jobs []*Job
	for i, h := range Hosts[1:] {
		k := n / 3
		if i < n%3 {
			k++
		}
		if k == 0 {
			continue
		}
		jobs = append(jobs, &Job{Name: "writer", Consumer: HostAddr(h), Device: Devices[i+1], Write: true, BS: 64 << 10, IODepth: k,
			Start: start, Length: length, Off: off})
	}
	return jobs
}

func readWait(iv sample.Interval) float64 { return iv.ReadWaitMs }
func writeMBs(iv sample.Interval) float64 { return iv.WriteBps / 1e6 }

// InterferenceWriters are the thesis' interference levels.
var InterferenceWriters = []int{0, 1, 3, 12}

func runInterference(o Options) (any, error) {
	lead, wrun, tail := o.scale(60*time.Second), o.scale(65*time.Second), o.scale(20*time.Second)
	sum := report.InterferenceSummary{Experiment: "interference", Scale: o.Scale}
	var series []report.Series
	var all []*PhaseResult
	for i, n := range InterferenceWriters {
		p := labPhase(fmt.Sprintf("writers-%d", n), fmt.Sprintf("%d writers", n), lead+wrun+tail, lead, lead+wrun)
		p.Jobs = append([]*Job{reader(lead + wrun + tail)}, writers(n, lead, wrun, 0)...)
		res, err := RunPhase(p, o.Params, o.Seed+uint64(i))
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		waits := report.Values(res.Window(), "b2", readWait)
		d := report.RoundDist(report.Describe(waits))
		sum.Runs = append(sum.Runs, report.InterferenceRun{Writers: n, ReadWaitMs: d,
			WriteMBs: report.Round(report.Aggregate(res.Window(), Hosts[1:], writeMBs), 2), P95PerRepeat: []float64{d.P95}})
		x, y := res.Series("b2", readWait)
		series = append(series, report.Series{Name: p.Label, X: x, Y: report.Smooth(y)})
	}
	if base := sum.Runs[0].ReadWaitMs.P95; base > 0 {
		sum.P95Ratio12 = report.Round(sum.Runs[len(sum.Runs)-1].ReadWaitMs.P95/base, 2)
	}
	if o.Out != "" {
		if err := writeTraceFile(o.Out, all); err != nil {
			return nil, err
		}
		if err := report.TimePlot(filepath.Join(o.Out, "read-wait.png"), "sim: smalljob's read wait vs interfering writers (Fig 5.7)",
			"time (s)", "read wait of b2's LUN (ms, EWMA 0.15)", series, nil); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

func writeTraceFile(dir string, rs []*PhaseResult) error {
	f, err := os.Create(filepath.Join(dir, "trace.csv"))
	if err != nil {
		return err
	}
	if err := WriteTrace(f, rs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Thresholds of the pid and autonomic experiments (thesis Fig 5.9).
var Thresholds = []time.Duration{10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond}

// agentConfig is the agent's config for a controlled run, as the lab
// writes it: autonomic gives only the threshold; pid names the devices
// and the sets.
func agentConfig(thr time.Duration, autonomic bool, extra string) (*config.Config, *agent.Topology, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "backend: dry-run\nthreshold: %v\n%s\n", thr, extra)
	if autonomic {
		b.WriteString("discovery:\n  source: tgt\nresources:\n  - name: vg1\n")
	} else {
		var thr []string
		for _, h := range Hosts[1:] {
			thr = append(thr, HostAddr(h).String())
		}
		fmt.Fprintf(&b, "discovery:\n  source: static\nresources:\n  - name: vg1\n    devices: [%s]\n    important: [%s]\n    throttleable: [%s]\n",
			strings.Join(Devices, ", "), HostAddr("b2"), strings.Join(thr, ", "))
	}
	cfg, err := config.Parse([]byte(b.String()))
	if err != nil {
		return nil, nil, fmt.Errorf("agent config: %w", err)
	}
	if !autonomic {
		t, _ := agent.StaticDiscoverer(cfg).Discover()
		return cfg, t, nil
	}
	// What tgt discovery reports in the lab: one pool, each initiator on
	// its own LUN.
	v := agent.ResourceView{Devices: Devices, Consumers: map[netip.Addr][]string{}}
	for i, h := range Hosts {
		v.Consumers[HostAddr(h)] = []string{Devices[i]}
	}
	return cfg, &agent.Topology{Resources: map[string]agent.ResourceView{"vg1": v}}, nil
}

// ControlledPhase is the pid/autonomic workload: the reader throughout,
// 12 writers on for 25 s and off for 5 s, six times (thesis' times ×
// scale). thr 0 is the baseline (no agent).
func ControlledPhase(o Options, thr time.Duration, autonomic bool) (*Phase, []float64, error) {
	lead, on, off, cycles, tail := o.scale(20*time.Second), o.scale(25*time.Second), o.scale(5*time.Second), 6, o.scale(10*time.Second)
	length := lead + time.Duration(cycles)*(on+off) + tail
	name, label := "baseline", "agent off"
	if thr > 0 {
		name, label = fmt.Sprintf("threshold-%v", thr), fmt.Sprintf("threshold %v", thr)
	}
	p := labPhase(name, label, length, lead, lead+time.Duration(cycles)*(on+off))
	p.Jobs = append([]*Job{reader(length)}, writers(12, lead, on, off)...)
	// The on/off schedule repeats forever; cut it after six cycles.
	for _, j := range p.Jobs[1:] {
		j.Until = lead + time.Duration(cycles)*(on+off)
	}
	var steps []float64
	for c := 0; c < cycles; c++ {
		steps = append(steps, (lead + time.Duration(c)*(on+off)).Seconds())
	}
	if thr > 0 {
		cfg, topo, err := agentConfig(thr, autonomic, o.AgentYAML)
		if err != nil {
			return nil, nil, err
		}
		p.Agent, p.Topology = cfg, topo
	}
	return p, steps, nil
}

func runControlled(o Options, autonomic bool) (any, error) {
	name := "pid"
	if autonomic {
		name = "autonomic"
	}
	onS := o.scale(25 * time.Second).Seconds()
	sum := report.ControlledSummary{Experiment: name}
	thresholds := Thresholds
	if len(o.Thresholds) > 0 {
		thresholds = o.Thresholds
	}
	var series, wseries, dseries []report.Series
	var all []*PhaseResult
	for i, thr := range append([]time.Duration{0}, thresholds...) {
		p, steps, err := ControlledPhase(o, thr, autonomic)
		if err != nil {
			return nil, err
		}
		res, err := RunPhase(p, o.Params, o.Seed+uint64(i))
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		run := ControlledRunOf(res, thr, steps, onS)
		if thr == 0 {
			sum.Baseline = run
		} else {
			sum.Regulated = append(sum.Regulated, run)
			var dx, dy []float64
			for _, t := range res.Ticks {
				dx, dy = append(dx, t.T), append(dy, t.Delay)
			}
			dseries = append(dseries, report.Series{Name: p.Label, X: dx, Y: dy})
		}
		x, y := res.Series("b2", readWait)
		series = append(series, report.Series{Name: p.Label, X: x, Y: report.Smooth(y)})
		wx, wy := report.AggregateSeries(res.Ticks, Hosts[1:], writeMBs)
		wseries = append(wseries, report.Series{Name: p.Label, X: wx, Y: report.Smooth(wy)})
	}
	sum.Judge()
	if o.Out == "" {
		return sum, nil
	}
	if err := writeTraceFile(o.Out, all); err != nil {
		return nil, err
	}
	var refs []report.Line
	for _, t := range thresholds {
		refs = append(refs, report.Line{Name: fmt.Sprintf("%v", t), Y: float64(t) / 1e6})
	}
	if err := report.TimePlot(filepath.Join(o.Out, "read-wait.png"), fmt.Sprintf("sim %s: reader's wait per threshold vs no regulation (Fig 5.9/5.11)", name),
		"time (s)", "read wait (ms, EWMA 0.15)", series, refs); err != nil {
		return nil, err
	}
	if err := report.TimePlot(filepath.Join(o.Out, "write-rate.png"), "sim "+name+": aggregate write rate of the 12 writers (Fig 5.10/5.12)",
		"time (s)", "MB/s (EWMA 0.15)", wseries, nil); err != nil {
		return nil, err
	}
	return sum, report.TimePlot(filepath.Join(o.Out, "delay.png"), "sim "+name+": write delay applied to the throttleable set (Fig 5.13)",
		"time (s)", "delay (ms)", dseries, nil)
}

// ControlledRunOf computes one run's figures exactly as the lab does
// (lab.controlledRun): window p95, aggregate write rate, share of
// intervals above 1.2 × threshold, mean settling time after each on-step.
func ControlledRunOf(res *PhaseResult, thr time.Duration, steps []float64, onS float64) report.ControlledRun {
	waits := report.Values(res.Window(), "b2", readWait)
	run := report.ControlledRun{ThresholdMs: float64(thr) / 1e6, ReadWaitMs: report.RoundDist(report.Describe(waits)),
		WriteMBs: report.Round(report.Aggregate(res.Window(), Hosts[1:], writeMBs), 2)}
	onset := report.FirstSecond(res.Ticks, "b2", Hosts[1:], steps, onS)
	run.Onset = &onset
	if thr == 0 {
		return run
	}
	x, y := res.Series("b2", readWait)
	run.PctAbove, run.SettleS = report.Regulation(run.ThresholdMs, waits, x, y, steps, onS)
	var on, inWin int
	for _, t := range res.Window() {
		inWin++
		run.MaxDelay = math.Max(run.MaxDelay, t.Delay)
		if t.Delay > 0 {
			on++
		}
	}
	if inWin > 0 {
		run.Throttled = report.Round(100*float64(on)/float64(inWin), 1)
	}
	return run
}

// SweepPoint is one delay's rate (the lab's delay-sweep points).
type SweepPoint struct {
	Direction string  `json:"direction"`
	DelayMs   float64 `json:"delay_ms"`
	MBs       float64 `json:"mb_s"`
	Stderr    float64 `json:"stderr"`
}

// SweepSummary is the simulated delay-sweep's summary.json.
type SweepSummary struct {
	Experiment string             `json:"experiment"`
	Points     []SweepPoint       `json:"points"`
	R2         map[string]float64 `json:"r2"`
	Ratio      map[string]float64 `json:"ratio_max_delay_vs_0"`
}

// SweepDelaysMs are the lab's delay-sweep points.
var SweepDelaysMs = []float64{0, 0.6, 1.6, 2.6, 3.6, 4.6, 5.6, 6.6, 7.6, 8.6, 9.6}

// SweepRate is one 64 KiB stream's MB/s under a fixed delay.
func SweepRate(par Params, write bool, delayMs float64, length time.Duration, seed uint64) (float64, error) {
	p := labPhase("sweep", "sweep", length, 0, length)
	p.Jobs = []*Job{{Name: "sweep", Consumer: HostAddr("b2"), Device: "loop0", Write: write, BS: 64 << 10, IODepth: 1}}
	d := time.Duration(delayMs * 1e6)
	s := throttle.Setting{ReadDelay: d}
	if write {
		s = throttle.Setting{WriteDelay: d}
	}
	p.Fixed = map[netip.Addr]throttle.Setting{HostAddr("b2"): s}
	if d == 0 {
		p.Fixed = nil
	}
	res, err := RunPhase(p, par, seed)
	if err != nil {
		return 0, err
	}
	f := writeMBs
	if !write {
		f = func(iv sample.Interval) float64 { return iv.ReadBps / 1e6 }
	}
	return report.Aggregate(res.Window(), []string{"b2"}, f), nil
}

func runDelaySweep(o Options) (any, error) {
	sum := SweepSummary{Experiment: "delay-sweep", R2: map[string]float64{}, Ratio: map[string]float64{}}
	var bars []report.Bar
	for _, dir := range []string{"read", "write"} {
		var xs, ys []float64
		for i, d := range SweepDelaysMs {
			r, err := SweepRate(o.Params, dir == "write", d, o.scale(20*time.Second), o.Seed+uint64(i))
			if err != nil {
				return nil, err
			}
			sum.Points = append(sum.Points, SweepPoint{Direction: dir, DelayMs: d, MBs: report.Round(r, 3)})
			xs, ys = append(xs, d), append(ys, r)
			bars = append(bars, report.Bar{Label: fmt.Sprintf("%s %.1f", dir[:1], d), Value: r})
		}
		sum.R2[dir] = report.Round(r2(xs, ys), 4)
		if ys[0] > 0 {
			sum.Ratio[dir] = report.Round(ys[len(ys)-1]/ys[0], 3)
		}
	}
	if o.Out != "" {
		if err := report.BarPlot(filepath.Join(o.Out, "rate-vs-delay.png"), "sim: 64 KiB stream rate vs added delay (Fig 5.5/5.6)", "MB/s", bars); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// r2 is the coefficient of determination of a least-squares line.
func r2(x, y []float64) float64 {
	n := float64(len(x))
	var sx, sy, sxx, sxy, syy float64
	for i := range x {
		sx, sy = sx+x[i], sy+y[i]
		sxx, sxy, syy = sxx+x[i]*x[i], sxy+x[i]*y[i], syy+y[i]*y[i]
	}
	cov, vx, vy := sxy-sx*sy/n, sxx-sx*sx/n, syy-sy*sy/n
	if vx == 0 || vy == 0 {
		return math.NaN()
	}
	return cov * cov / (vx * vy)
}

// errNoLab is returned when a calibration input is missing.
var errNoLab = errors.New("no lab summary")
