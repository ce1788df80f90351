package sim

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/report"
)

// Thresholds of the pid and autonomic experiments (thesis Fig 5.9).
var Thresholds = []time.Duration{10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond}

// load builds a controlled experiment's interferers, the jobs of b3..b5:
// on from start for length, then off for off, repeating (length 0: on
// throughout, as the oracle's steady probes want).
type load func(start, length, off time.Duration) []*Job

// twelveWriters is the thesis' interference: 12 sequential 64 KiB writer
// threads over b3..b5.
func twelveWriters(start, length, off time.Duration) []*Job { return writers(12, start, length, off) }

// controlled is one controlled experiment: the reader against a load
// toggled on and off, without the agent and at each threshold with it.
// pid, autonomic and issue 30's interferers differ only in the load, the
// agent's config, whether an oracle runs, and how the plots name it.
type controlled struct {
	name        string // summary.json's experiment
	interferers string // summary.json's interferers ("": writers)
	many        string // interferers that read, in plot titles
	load        load
	autonomic   bool // the default config (threshold only) vs given sets
	oracle      bool // search and run the best static delay per threshold
}

var (
	pidExperiment       = &controlled{name: "pid", load: twelveWriters}
	autonomicExperiment = &controlled{name: "autonomic", load: twelveWriters, autonomic: true}
)

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
	return cfg, labTopology(), nil
}

// labTopology is what tgt discovery reports in the lab: one pool, each
// initiator on its own LUN.
func labTopology() *agent.Topology {
	v := agent.ResourceView{Devices: Devices, Consumers: map[netip.Addr][]string{}}
	for i, h := range Hosts {
		v.Consumers[HostAddr(h)] = []string{Devices[i]}
	}
	return &agent.Topology{Resources: map[string]agent.ResourceView{"vg1": v}}
}

// controlledPhase is a controlled experiment's workload: the reader
// throughout, ld's interferers on for 25 s and off for 5 s, six times
// (thesis' times × scale), the same cycles for every load, so each is
// judged on the same pattern of load steps; steps are the on-steps' times
// (s). thr 0 is the baseline (no agent).
func controlledPhase(o Options, thr time.Duration, autonomic bool, ld load) (*Phase, []float64, error) {
	s := report.ControlledSchedule(o.scale, 0)
	name, label := "baseline", "agent off"
	if thr > 0 {
		name, label = fmt.Sprintf("threshold-%v", thr), fmt.Sprintf("threshold %v", thr)
	}
	p := labPhase(name, label, s.Length(), s.Lead, s.End())
	p.Jobs = append([]*Job{reader(s.Length())}, ld(s.Lead, s.On, s.Off)...)
	// The on/off schedule repeats forever; cut it after six cycles.
	for _, j := range p.Jobs[1:] {
		j.Until = s.End()
	}
	if thr > 0 {
		cfg, topo, err := agentConfig(thr, autonomic, o.AgentYAML)
		if err != nil {
			return nil, nil, err
		}
		p.Agent, p.Topology = cfg, topo
	}
	return p, s.Steps(), nil
}

// onS is the length of the controlled experiments' on-periods (s).
func (o Options) onS() float64 { return o.scale(25 * time.Second).Seconds() }

// thresholds are the run's thresholds (the thesis' unless given).
func (o Options) thresholds() []time.Duration {
	if len(o.Thresholds) > 0 {
		return o.Thresholds
	}
	return Thresholds
}

// runControlled runs the baseline and one agent run per threshold (seeds
// Seed, Seed+1, …), then the oracle if the experiment has one.
func runControlled(o Options, c *controlled) (any, error) {
	sum := report.ControlledSummary{Experiment: c.name, Interferers: c.interferers}
	thresholds := o.thresholds()
	var pl report.ControlledPlots
	var all []*PhaseResult
	for i, thr := range append([]time.Duration{0}, thresholds...) {
		p, steps, err := controlledPhase(o, thr, c.autonomic, c.load)
		if err != nil {
			return nil, err
		}
		res, err := RunPhase(p, o.Params, o.Seed+uint64(i))
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		run := ControlledRunOf(res, thr, steps, o.onS())
		if thr == 0 {
			sum.Baseline = run
		} else {
			sum.Regulated = append(sum.Regulated, run)
		}
		addPlots(&pl, res, c, thr > 0, true)
	}
	if c.oracle {
		or, runs, err := runOracle(o, c, thresholds)
		if err != nil {
			return nil, err
		}
		sum.Oracle = or
		for _, res := range runs {
			all = append(all, res)
			addPlots(&pl, res, c, true, false)
		}
	}
	sum.Judge()
	if o.Out == "" {
		return sum, nil
	}
	if err := writeTraceFile(o.Out, all); err != nil {
		return nil, err
	}
	return sum, pl.Write(o.Out, report.ControlledTitlesOf("sim "+c.name, 12, c.interferers != "", c.many), thresholds)
}

// addPlots plots a run; delayed runs (the agent's, the oracle's) have a delay
// curve, and only waited ones join the wait plot, which stays readable
// with the baseline and one curve per threshold.
func addPlots(pl *report.ControlledPlots, res *PhaseResult, c *controlled, delayed, waited bool) {
	label := res.Phase.Label
	if delayed {
		var dx, dy []float64
		for _, t := range res.Ticks {
			dx, dy = append(dx, t.T), append(dy, t.anyDelay())
		}
		pl.Delay = append(pl.Delay, report.Series{Name: label, X: dx, Y: dy})
	}
	if waited {
		x, y := res.Series("b2", readWait)
		pl.Wait = append(pl.Wait, report.Series{Name: label, X: x, Y: report.Smooth(y)})
	}
	rate := writeMBs // what the interferers move: both ways where they read
	if c.interferers != "" {
		rate = movedMBs
	}
	x, y := report.AggregateSeries(res.Ticks, Hosts[1:], rate)
	pl.Rate = append(pl.Rate, report.Series{Name: label, X: x, Y: report.Smooth(y)})
}

// ControlledRunOf computes one run's figures as the lab does
// (report.JudgeControlled, the interferers' reads counted whatever the
// load), and the delay in either direction (a backup is slowed by read
// delay, a writer by write delay).
func ControlledRunOf(res *PhaseResult, thr time.Duration, steps []float64, onS float64) report.ControlledRun {
	w := res.Window()
	run := report.JudgeControlled(res.Ticks, w, "b2", Hosts[1:], thr, steps, onS, true, &res.Onset)
	if thr == 0 {
		return run
	}
	run.Events = digestEvents(res.AgentEvents)
	var on int
	for _, t := range w {
		run.MaxDelay = math.Max(run.MaxDelay, t.anyDelay())
		if t.anyDelay() > 0 {
			on++
		}
	}
	if len(w) > 0 {
		run.Throttled = report.Round(100*float64(on)/float64(len(w)), 1)
	}
	return run
}
