package experiments

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// controlled is one controlled experiment: the reader against a load
// toggled on and off, without the agent (the baseline) and with it at
// each threshold, then, where it has one, the same-run oracle. pid,
// autonomic, bridge-autonomic and issue 30's read-backup and mixed differ
// only in these fields.
type controlled struct {
	load *interferers
	// autonomic: the agent's default config (threshold only, sets and
	// indicators discovered) rather than given sets (pid).
	autonomic bool
	// bridge: the agent in sqlan, bridge mode (bridge_autonomic.go).
	bridge bool
	// oracle: search and run the best static delay per threshold unless
	// --no-oracle.
	oracle bool
	// thresholds unless --thresholds.
	thresholds []time.Duration
}

var controlledExperiments = map[string]*controlled{
	"pid":              {load: writerLoad, thresholds: Thresholds},
	"autonomic":        {load: writerLoad, autonomic: true, oracle: true, thresholds: AutonomicThresholds},
	"bridge-autonomic": {load: writerLoad, autonomic: true, bridge: true, thresholds: Thresholds},
	"read-backup":      {load: backupLoad, autonomic: true, oracle: true, thresholds: Thresholds},
	"mixed":            {load: mixedLoad, autonomic: true, oracle: true, thresholds: Thresholds},
}

// The controlled experiments but bridge-autonomic (bridge_autonomic.go):
// pid (thesis Fig 5.9/5.10), autonomic (Fig 5.11–5.13) and issue 30's
// read-backup and mixed.
func init() {
	flags := []*Flag{flagThresholds, flagThresholdAuto, flagAgentSet, flagCompareSet, flagCycles, flagNoOracle, flagLUNMap, flagBackends}
	fixedLoad := slices.DeleteFunc(slices.Clone(flags), func(f *Flag) bool { return f == flagNoOracle || f == flagLUNMap })
	for _, e := range []*Experiment{
		{Name: "pid", Flags: append(fixedLoad, flagWriters), Plots: []report.SummaryPlot{report.WaitVsThresholdPlot},
			Title: "PID with given sets holds 10/15/20 ms under 12 writers toggled on/off (Fig 5.9/5.10)"},
		{Name: "autonomic", Flags: append(flags, flagWriters), Plots: []report.SummaryPlot{report.WaitVsThresholdPlot},
			Title: "Same load, sets and indicators discovered automatically (Fig 5.11–5.13)"},
		{Name: "read-backup", Flags: flags, Plots: []report.SummaryPlot{report.WaitVsThresholdPlot},
			Title: "autonomic vs a backup: b3-b5 read sequentially, 64 KiB, 4 streams each, toggled on/off; with the static-delay oracle"},
		{Name: "mixed", Flags: flags, Plots: []report.SummaryPlot{report.WaitVsThresholdPlot},
			Title: "autonomic vs VMs and a database: b3-b5 random 8/64 KiB reads and writes (70/30, 50/50), toggled on/off; with the static-delay oracle"},
	} {
		e.DefaultScale = 0.25
		e.Run = func(r *runner) (any, error) { return runControlled(r, e.Name) }
		register(e)
	}
}

// controlledPhase is a controlled experiment's phase: the reader
// throughout, l's jobs in every on-period, named by cycle (writer-0, …).
func (r *runner) controlledPhase(l *interferers, s report.Schedule, name, label string) *lab.Phase {
	p := &lab.Phase{Name: name, Label: label, Length: s.Length(), From: s.Lead, To: s.End()}
	p.Jobs = []lab.Job{r.reader(s.Length())}
	for c := 0; c < s.Cycles; c++ {
		for _, j := range l.jobs(r, s.Start(c), s.On) {
			j.Name = fmt.Sprintf("%s-%d", j.Name, c)
			p.Jobs = append(p.Jobs, j)
		}
	}
	return p
}

// controlledRuns is one invocation of a controlled experiment: its
// summary, its runs, the plots' series and the agents' costs so far.
type controlledRuns struct {
	c     *controlled
	r     *runner
	name  string
	s     report.Schedule
	sum   ControlledSummary
	all   []*lab.PhaseResult
	steps []float64
	// the plots' series: reader's wait, interferers' rate, delay, caps
	plots                report.ControlledPlots
	cpu, shadowCPU, wall float64
	held                 uint64 // packets the delay line held
	late                 throttle.Lateness
	tracking             []PassiveTracking
	trackPlot            []report.Series
	firstCfg             string
}

// runControlled runs kind: pid, autonomic, bridge-autonomic (the agent in
// sqlan, bridge mode, bridge_autonomic.go), read-backup or mixed.
func runControlled(r *runner, kind string) (any, error) {
	c := controlledExperiments[kind]
	if c.load != writerLoad && r.opts.Writers > 0 {
		return nil, fmt.Errorf("%s: --writers sets pid's and autonomic's writers; this load is fixed", kind)
	}
	if c.bridge && len(r.opts.Backends) > 0 {
		return nil, errors.New("bridge-autonomic runs its agent on the delay line only: no --backends")
	}
	cr := &controlledRuns{c: c, r: r, name: kind, s: report.ControlledSchedule(r.Scale, r.opts.Cycles)}
	cr.steps = cr.s.Steps()
	cr.sum = ControlledSummary{Experiment: kind, Interferers: c.load.name, Backend: r.regulatingBackend(), Cycles: cr.s.Cycles}
	if c.load == writerLoad {
		cr.sum.Writers = r.controlledWriters()
	}
	if err := cr.baseline(); err != nil {
		return nil, err
	}
	thresholds := c.thresholds
	if len(r.opts.Thresholds) > 0 {
		thresholds = r.opts.Thresholds
	}
	if r.opts.ThresholdAuto { // not bridge-autonomic's: bridge mode has no diskstats
		thresholds = []time.Duration{config.AutoStart} // one run, named threshold-auto
	}
	backends := []string{""} // "": the backend --agent-set names, else the delay line
	if len(r.opts.Backends) > 0 {
		backends = r.opts.Backends
		cr.sum.Backend, cr.sum.Backends = "", backends
	}
	agentYAML := r.opts.AgentYAML
	defer func() { r.opts.AgentYAML = agentYAML }()
	for _, be := range backends {
		tag := ""
		if be != "" {
			r.opts.AgentYAML = withBackend(agentYAML, be)
			tag = be + "-"
		}
		for _, thr := range thresholds {
			if err := cr.regulated(be, tag, thr); err != nil {
				return nil, err
			}
		}
	}
	if v := r.opts.CompareYAML; v != "" {
		r.opts.AgentYAML = agentYAML + "\n" + v + "\n"
		for _, thr := range thresholds {
			if err := cr.regulated("", "cmp-", thr); err != nil {
				return nil, err
			}
			cr.sum.Regulated[len(cr.sum.Regulated)-1].Variant = v
		}
	}
	r.opts.AgentYAML = agentYAML
	cr.totals()
	if r.opts.ThresholdAuto {
		thresholds = cr.chosen() // the plots' reference lines
	}
	if c.oracle && !r.opts.NoOracle && !r.opts.ThresholdAuto {
		if err := cr.runOracle(thresholds); err != nil {
			return nil, err
		}
	}
	cr.sum.Judge()
	if err := cr.plot(thresholds); err != nil {
		return nil, err
	}
	if !c.bridge {
		return cr.sum, nil
	}
	return cr.bridgeSummary(thresholds[0])
}

func (cr *controlledRuns) phase(name, label string) *lab.Phase {
	return cr.r.controlledPhase(cr.c.load, cr.s, name, label)
}

// judge is a run's figures (thr 0: the baseline's).
func (cr *controlledRuns) judge(res *lab.PhaseResult, thr time.Duration) ControlledRun {
	return controlledRun(res, thr, cr.steps, cr.s.On.Seconds(), cr.c.load.reads, nil)
}

// baseline runs the load without an agent.
func (cr *controlledRuns) baseline() error {
	p := cr.phase("baseline", "agent off")
	base, err := cr.r.Run(p, 0)
	if err != nil {
		return err
	}
	cr.all = append(cr.all, base)
	cr.sum.Baseline = cr.judge(base, 0)
	// The reader alone, before the first interferer: what no throttle of
	// them can improve on.
	cr.sum.ReaderAloneP95Ms = report.Round(report.Describe(report.Values(base.Between(time.Second, cr.s.Lead), "b2", readWait)).P95, 2)
	cr.plotRun(base, "agent off")
	return nil
}

// plotRun adds a run's reader wait and interferers' rate to the plots.
func (cr *controlledRuns) plotRun(res *lab.PhaseResult, label string) {
	x, y := res.Series("b2", readWait)
	cr.plots.Wait = append(cr.plots.Wait, report.Series{Name: label, X: x, Y: report.Smooth(y)})
	wx, wy := report.AggregateSeries(res.Ticks, lab.Hosts[1:], cr.c.load.moved)
	cr.plots.Rate = append(cr.plots.Rate, report.Series{Name: label, X: wx, Y: report.Smooth(wy)})
}

// startAgents starts a regulated run's agent, and beside it (target mode)
// a dry-run shadow with the same config, whose CPU is the control loop's.
func (cr *controlledRuns) startAgents(cfgPath, tag string, thr time.Duration) (a, shadow *lab.LabAgent, err error) {
	r := cr.r
	if cr.c.bridge {
		// No shadow: a second capture would double the work measured.
		if err := r.bridgeAgentConfig(cfgPath, thr); err != nil {
			return nil, nil, err
		}
		a, err = lab.StartAgentIn(lab.SwitchNS, "agent", "delayline", r.Dir, "--config", cfgPath)
		return a, nil, err
	}
	if err := r.agentConfig(cfgPath, thr, cr.c.autonomic); err != nil {
		return nil, nil, err
	}
	shadowCfg := filepath.Join(r.Dir, fmt.Sprintf("shadow-%s%v.yaml", tag, thr))
	if err := r.writeAgentConfig(shadowCfg, "dry-run", "127.0.0.1:9312", thr, cr.c.autonomic); err != nil {
		return nil, nil, err
	}
	// The flag names the config's backend: a flag overrides the config's
	// key (cmd/sanqos, agent_overrides.go), so "delayline" here ran every
	// --backends and --agent-set 'backend: …' run on the delay line.
	if a, err = lab.StartAgent(r.regulatingBackend(), r.Dir, "--config", cfgPath); err != nil {
		return nil, nil, err
	}
	if shadow, err = lab.StartAgentNamed("shadow", "dry-run", r.Dir, "--config", shadowCfg); err != nil {
		a.Stop()
		return nil, nil, err
	}
	return a, shadow, nil
}

// regulated runs the load once with the agent at thr (on backend be,
// "": the default), and records it.
func (cr *controlledRuns) regulated(be, tag string, thr time.Duration) error {
	r, length := cr.r, cr.s.Length()
	thrName := thr.String()
	if r.opts.ThresholdAuto {
		thrName = "auto"
	}
	cfgPath := filepath.Join(r.Dir, fmt.Sprintf("agent-%s%s.yaml", tag, thrName))
	cr.firstCfg = cmp.Or(cr.firstCfg, cfgPath)
	a, shadow, err := cr.startAgents(cfgPath, tag, thr)
	if err != nil {
		return err
	}
	p := cr.phase(fmt.Sprintf("%sthreshold-%s", tag, thrName), fmt.Sprintf("%sthreshold %s", strings.ReplaceAll(tag, "-", " "), thrName))
	var ds delaySamples
	t0 := time.Now()
	p.Events = delaySampler(a, length, cr.c.load, &ds)
	var ps *passiveSeries
	if cr.c.bridge {
		ps = &passiveSeries{}
		p.Events = append(p.Events, ps.events(a, length)...)
	}
	var runLate throttle.Lateness
	c0, s0 := lab.CPUSeconds(a.Pid()), 0.0
	if shadow != nil {
		s0 = lab.CPUSeconds(shadow.Pid())
	}
	res, err := r.Run(p, 0)
	runCPU := lab.CPUSeconds(a.Pid()) - c0
	cr.cpu += runCPU
	var runShadow float64
	if shadow != nil {
		runShadow = lab.CPUSeconds(shadow.Pid()) - s0
		cr.shadowCPU += runShadow
	}
	cr.wall += time.Since(t0).Seconds()
	var events *report.ThrottleEvents
	if err == nil {
		runLate, err = cr.agentCounters(a)
	}
	if err == nil {
		events, err = recordEvents(a, r.Dir, p.Name)
	}
	if err = stopAgents(err, a, shadow); err != nil {
		return err
	}
	if ps != nil {
		cr.tracking = append(cr.tracking, ps.track(res, thr))
		if len(cr.tracking) == 1 {
			cr.trackPlot = ps.plot(res, thr)
		}
	}
	cr.all = append(cr.all, res)
	var auto *report.AutoThresholdRun
	if r.opts.ThresholdAuto {
		auto = ds.autoThreshold(res, p)
		thr = time.Duration(auto.ChosenMs * 1e6) // the run is judged against what the agent chose
	}
	run := controlledRun(res, thr, cr.steps, cr.s.On.Seconds(), cr.c.load.reads, ds.onsetQueue(res))
	run.ThresholdAuto = auto
	run.Events = events
	if be != "" {
		run.Backend = be
		if w := time.Since(t0).Seconds(); w > 0 {
			run.AgentCPUPct = report.Round(100*runCPU/w, 2)
			run.ControlCPUPct = report.Round(100*runShadow/w, 2)
		}
	}
	if runLate.Count > 0 {
		run.DelayLineLate = lateSummary(runLate)
	}
	ds.throttled(&run, p)
	if err := ds.writeCSVs(r.Dir, p.Name); err != nil {
		return err
	}
	if run.ThresholdMs <= cr.sum.ReaderAloneP95Ms {
		run.Unreachable = cr.c.load.unreachable(cr.sum.ReaderAloneP95Ms)
	}
	cr.sum.Regulated = append(cr.sum.Regulated, run)
	cr.plotRun(res, p.Label)
	cr.plots.Delay = append(cr.plots.Delay, ds.series(p.Label, cr.c.load)...)
	if slices.ContainsFunc(ds.caps, func(c float64) bool { return c > 0 }) {
		cr.plots.Caps = append(cr.plots.Caps, report.Series{Name: p.Label, X: ds.x, Y: ds.caps})
	}
	return nil
}

// chosen are the thresholds threshold: auto chose in the regulated runs.
func (cr *controlledRuns) chosen() []time.Duration {
	var out []time.Duration
	for _, run := range cr.sum.Regulated {
		out = append(out, time.Duration(run.ThresholdMs*1e6))
	}
	return out
}

// agentCounters adds a fresh agent's held packets and lateness (its
// counters are this run's) to the totals and returns its lateness.
func (cr *controlledRuns) agentCounters(a *lab.LabAgent) (throttle.Lateness, error) {
	cs, cerr := a.Counters()
	for _, c := range cs {
		cr.held += c.Packets
	}
	st, serr := a.Stats()
	cr.late = cr.late.Add(st.Late)
	return st.Late, errors.Join(cerr, serr)
}

// stopAgents stops a run's agent and shadow (nil: none); err is the run's
// own error, which comes first.
func stopAgents(err error, agents ...*lab.LabAgent) error {
	for _, a := range agents {
		if a == nil {
			continue
		}
		err = cmp.Or(err, a.Stop())
	}
	return err
}

// runOracle searches the best static delay per threshold within the
// first regulated run's delay step and max_delay, and runs it.
func (cr *controlledRuns) runOracle(thresholds []time.Duration) error {
	cfg, err := config.Load(cr.firstCfg)
	if err != nil {
		return err
	}
	cr.sum.Oracle, err = runOracle(cr.r, cr.c.load, thresholds, cfg.DelayStep, cfg.MaxDelay, cr.s, cr.phase, cr.judge)
	return err
}

// bridgeSummary is bridge-autonomic's summary: the controlled one and the
// passive indicator's tracking of diskstats.
func (cr *controlledRuns) bridgeSummary(thr time.Duration) (any, error) {
	bs := BridgeSummary{ControlledSummary: cr.sum, Passive: cr.tracking}
	if len(cr.trackPlot) == 0 {
		return bs, nil
	}
	return bs, report.TimePlot(filepath.Join(cr.r.Dir, "passive-vs-diskstats.png"),
		fmt.Sprintf("%s: reader's read wait, passive (on the wire, what the agent uses) vs diskstats in bm, threshold %v", cr.name, thr),
		"time (s)", "read wait (ms, EWMA 0.15)", cr.trackPlot, nil)
}
