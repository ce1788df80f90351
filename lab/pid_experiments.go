package lab

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/guestenv"
	"github.com/sanqos/sanqos/lab/diskmodel"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

func init() {
	register(&Experiment{Name: "pid", Title: "PID with given sets holds 10/15/20 ms under 12 writers toggled on/off (Fig 5.9/5.10)",
		DefaultScale: 0.25, Backends: true, Run: func(r *Runner) (any, error) { return runControlled(r, "pid") }})
	register(&Experiment{Name: "autonomic", Title: "Same load, sets and indicators discovered automatically (Fig 5.11–5.13)",
		DefaultScale: 0.25, Backends: true, Run: func(r *Runner) (any, error) { return runControlled(r, "autonomic") }})
}

// ControlledRun and ControlledSummary are pid's and autonomic's
// summary.json (in report, shared with the simulator).
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

// controlledDefaults are the agent settings pid and autonomic run with
// unless --agent-set names the key: the threshold bounds the reader's
// p95 (the Done-when's measure), and 40 ms of delay — a fifth of TCP's
// 200 ms minimum RTO — is what 12 writers need at a 10 ms threshold (at
// 20 ms the PID pinned at max_delay and p95 stayed at 1.31×); in the TCG
// guest, tcgMaxDelay.
func controlledDefaults() [][2]string {
	maxDelay := "40ms"
	if guestenv.Emulated() {
		maxDelay = tcgMaxDelay
	}
	return [][2]string{{"objective", "p95"}, {"max_delay", maxDelay}}
}

// tcgMaxDelay is max_delay's default in the stock-kernel guest under TCG,
// where every round trip through the emulated stack is slower, so the
// same cut in the writers' rate takes more delay: there the oracle needed
// a static 43 ms on every writer to hold 15 ms, and 40 ms left the
// reader's p95 at 15.3 ms (results/autonomic/guest-bs8k-w12-80). 80 ms is
// still 2.5× below TCP's minimum RTO.
const tcgMaxDelay = "80ms"

// agentConfig writes the agent's config for a controlled run. autonomic
// gives only the threshold; pid names the devices and the sets.
func (r *Runner) agentConfig(path string, thr time.Duration, autonomic bool) error {
	return r.writeAgentConfig(path, "delayline", "127.0.0.1:9311", thr, autonomic)
}

func (r *Runner) writeAgentConfig(path, backend, http string, thr time.Duration, autonomic bool) error {
	return r.writeAgentConfigOn(path, backend, http, thr, autonomic, Target(0))
}

// writeAgentConfigOn is writeAgentConfig for the agent of target host t
// (autonomic discovery asks t's tgtd).
func (r *Runner) writeAgentConfigOn(path, backend, http string, thr time.Duration, autonomic bool, t TargetHost) error {
	var b strings.Builder
	// --agent-set may name the regulating agent's backend (delayline+htb
	// for the write-cap lever); the shadow stays dry-run.
	extra := r.opts.AgentYAML
	var kept []string
	for _, line := range strings.Split(extra, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "backend:") {
			if backend != "dry-run" {
				backend = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "backend:"))
			}
			continue
		}
		kept = append(kept, line)
	}
	extra = strings.Join(kept, "\n")
	fmt.Fprintf(&b, "backend: %s\nhttp: %s\nthreshold: %v\n%s\n", backend, http, thr, extra)
	for _, kv := range controlledDefaults() {
		if !strings.Contains(extra, kv[0]+":") {
			fmt.Fprintf(&b, "%s: %s\n", kv[0], kv[1])
		}
	}
	if v := r.scaledWriteMBs(); v > 0 && !strings.Contains(extra, "throttleable_write_mb_s:") {
		fmt.Fprintf(&b, "throttleable_write_mb_s: %g\n", v)
	}
	if autonomic {
		fmt.Fprintf(&b, "%sresources:\n  - name: %s\n", r.State.discoveryYAML(t), r.Res.Name)
	} else {
		var devs, thr []string
		for _, l := range r.Res.LUNs {
			devs = append(devs, l.Loop)
			if l.Host != "b2" {
				thr = append(thr, HostAddr(l.Host).String())
			}
		}
		fmt.Fprintf(&b, "discovery:\n  source: static\nresources:\n  - name: %s\n    devices: [%s]\n    important: [%s]\n    throttleable: [%s]\n",
			r.Res.Name, strings.Join(devs, ", "), HostAddr("b2"), strings.Join(thr, ", "))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// tcpSides splits a phase's TCP counters by sender: the writers' hosts
// (Hosts[1:]), the reader's (b2) and the target.
func tcpSides(res *PhaseResult) report.TCPSides {
	var s report.TCPSides
	for ns, c := range res.TCPByNS {
		switch {
		case isTargetNS(ns):
			s.Target = s.Target.Add(c)
		case ns == "b2":
			s.Reader = s.Reader.Add(c)
		default:
			s.Writers = s.Writers.Add(c)
		}
	}
	return s
}

// cpuSeconds is a process's user+system CPU time, its waited-for
// children's (tgtadm, tc, iptables) included.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 15 {
		return math.NaN()
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	cu, _ := strconv.ParseFloat(f[13], 64)
	cs, _ := strconv.ParseFloat(f[14], 64)
	return (u + st + cu + cs) / 100 // USER_HZ
}

// runControlled runs kind: pid, autonomic or bridge-autonomic (the agent
// in sqlan, bridge mode, bridge_experiment.go).
func runControlled(r *Runner, kind string) (any, error) {
	autonomic, bridge := kind != "pid", kind == "bridge-autonomic"
	sc := r.Scale
	lead, on, off, cycles, tail := sc(20*time.Second), sc(25*time.Second), sc(5*time.Second), 6, sc(10*time.Second)
	if r.opts.Cycles > 0 {
		cycles = r.opts.Cycles
	}
	nw := r.controlledWriters()
	length := lead + time.Duration(cycles)*(on+off) + tail
	mkPhase := func(name, label string) *Phase {
		p := &Phase{Name: name, Label: label, Length: length, From: lead, To: lead + time.Duration(cycles)*(on+off)}
		p.Jobs = []Job{r.reader(length)}
		for c := 0; c < cycles; c++ {
			for _, j := range r.writers(nw, lead+time.Duration(c)*(on+off), on) {
				j.Name = fmt.Sprintf("writer-%d", c)
				p.Jobs = append(p.Jobs, j)
			}
		}
		return p
	}
	name := kind
	sum := ControlledSummary{Experiment: name, Backend: r.regulatingBackend(), Writers: nw, Cycles: cycles}
	base, err := r.Run(mkPhase("baseline", "agent off"), 0)
	if err != nil {
		return nil, err
	}
	all := []*PhaseResult{base}
	stepsAt := func() []float64 {
		var s []float64
		for c := 0; c < cycles; c++ {
			s = append(s, (lead + time.Duration(c)*(on+off)).Seconds())
		}
		return s
	}()
	sum.Baseline = controlledRun(base, 0, stepsAt, on.Seconds())
	// The reader alone, before the first writer: what no throttle of
	// writers can improve on.
	sum.ReaderAloneP95Ms = round(report.Describe(report.Values(base.Between(time.Second, lead), "b2", readWait)).P95, 2)
	series := []report.Series{}
	x, y := base.Series("b2", readWait)
	series = append(series, report.Series{Name: "no regulation", X: x, Y: smooth(y)})
	wx, wy := report.AggregateSeries(base.Ticks, Hosts[1:], writeMBs)
	wseries := []report.Series{{Name: "no regulation", X: wx, Y: smooth(wy)}}
	var dseries, cseries []report.Series
	var cpu, shadowCPU, wall float64
	var held uint64 // packets the delay line held
	var late throttle.Lateness
	var tracking []PassiveTracking
	var trackPlot []report.Series
	thresholds := Thresholds
	if kind == "autonomic" {
		thresholds = AutonomicThresholds
	}
	if len(r.opts.Thresholds) > 0 {
		thresholds = r.opts.Thresholds
	}
	backends := []string{""} // "": the backend --agent-set names, else the delay line
	if len(r.opts.Backends) > 0 {
		if bridge {
			return nil, errors.New("bridge-autonomic runs its agent on the delay line only: no --backends")
		}
		backends = r.opts.Backends
		sum.Backend, sum.Backends = "", backends
	}
	agentYAML := r.opts.AgentYAML
	defer func() { r.opts.AgentYAML = agentYAML }()
	firstCfg := ""
	for _, be := range backends {
		tag := ""
		if be != "" {
			r.opts.AgentYAML = withBackend(agentYAML, be)
			tag = be + "-"
		}
		for _, thr := range thresholds {
			cfgPath := filepath.Join(r.Dir, fmt.Sprintf("agent-%s%v.yaml", tag, thr))
			if firstCfg == "" {
				firstCfg = cfgPath
			}
			var a, shadow *LabAgent
			var err error
			if bridge {
				// No shadow: a second capture would double the work measured.
				if err := r.bridgeAgentConfig(cfgPath, thr); err != nil {
					return nil, err
				}
				if a, err = startAgentIn(SwitchNS, "agent", "delayline", r.Dir, "--config", cfgPath); err != nil {
					return nil, err
				}
			} else {
				if err := r.agentConfig(cfgPath, thr, autonomic); err != nil {
					return nil, err
				}
				shadowCfg := filepath.Join(r.Dir, fmt.Sprintf("shadow-%s%v.yaml", tag, thr))
				if err := r.writeAgentConfig(shadowCfg, "dry-run", "127.0.0.1:9312", thr, autonomic); err != nil {
					return nil, err
				}
				if a, err = StartAgent("delayline", r.Dir, "--config", cfgPath); err != nil {
					return nil, err
				}
				if shadow, err = startAgentNamed("shadow", "dry-run", r.Dir, "--config", shadowCfg); err != nil {
					a.Stop()
					return nil, err
				}
			}
			p := mkPhase(fmt.Sprintf("%sthreshold-%v", tag, thr), fmt.Sprintf("%sthreshold %v", strings.ReplaceAll(tag, "-", " "), thr))
			var delays, caps []float64
			var dx []float64
			t0 := time.Now()
			p.Events = delaySampler(a, length, &dx, &delays, &caps)
			var ps *passiveSeries
			if bridge {
				ps = &passiveSeries{}
				p.Events = append(p.Events, ps.events(a, length)...)
			}
			var runLate throttle.Lateness
			c0, s0 := cpuSeconds(a.Pid()), 0.0
			if shadow != nil {
				s0 = cpuSeconds(shadow.Pid())
			}
			res, err := r.Run(p, 0)
			runCPU := cpuSeconds(a.Pid()) - c0
			cpu += runCPU
			var runShadow float64
			if shadow != nil {
				runShadow = cpuSeconds(shadow.Pid()) - s0
				shadowCPU += runShadow
			}
			wall += time.Since(t0).Seconds()
			if err == nil {
				// A fresh agent: its counters are this run's.
				cs, cerr := a.Counters()
				for _, c := range cs {
					held += c.Packets
				}
				st, serr := a.Stats()
				runLate = st.Late
				late = late.Add(st.Late)
				err = errors.Join(cerr, serr)
			}
			if serr := a.Stop(); err == nil {
				err = serr
			}
			if shadow != nil {
				if serr := shadow.Stop(); err == nil {
					err = serr
				}
			}
			if err != nil {
				return nil, err
			}
			if ps != nil {
				tracking = append(tracking, ps.track(res, thr))
				if len(tracking) == 1 {
					trackPlot = ps.plot(res, thr)
				}
			}
			all = append(all, res)
			run := controlledRun(res, thr, stepsAt, on.Seconds())
			if be != "" {
				run.Backend = be
				if w := time.Since(t0).Seconds(); w > 0 {
					run.AgentCPUPct = round(100*runCPU/w, 2)
					run.ControlCPUPct = round(100*runShadow/w, 2)
				}
			}
			if runLate.Count > 0 {
				run.DelayLineLate = lateSummary(runLate)
			}
			var on int
			for i, d := range delays {
				run.MaxDelay = math.Max(run.MaxDelay, d)
				if dx[i] > p.From.Seconds() && dx[i] <= p.To.Seconds() && d > 0 {
					on++
				}
			}
			var inWin int
			for _, x := range dx {
				if x > p.From.Seconds() && x <= p.To.Seconds() {
					inWin++
				}
			}
			if inWin > 0 {
				run.Throttled = round(100*float64(on)/float64(inWin), 1)
			}
			if run.ThresholdMs <= sum.ReaderAloneP95Ms {
				run.Unreachable = fmt.Sprintf("the threshold is at or below the reader's p95 with no writer at all (%.2f ms): the group's own service time for its reads, which slowing writers cannot shorten", sum.ReaderAloneP95Ms)
			}
			sum.Regulated = append(sum.Regulated, run)
			x, y := res.Series("b2", readWait)
			series = append(series, report.Series{Name: p.Label, X: x, Y: smooth(y)})
			wx, wy := report.AggregateSeries(res.Ticks, Hosts[1:], writeMBs)
			wseries = append(wseries, report.Series{Name: p.Label, X: wx, Y: smooth(wy)})
			dseries = append(dseries, report.Series{Name: p.Label, X: dx, Y: delays})
			if slices.ContainsFunc(caps, func(c float64) bool { return c > 0 }) {
				cseries = append(cseries, report.Series{Name: p.Label, X: dx, Y: caps})
			}
		}
	}
	r.opts.AgentYAML = agentYAML
	sum.TCP = sumTCP(all)
	sum.Retrans = sum.TCP.RetransSegs
	var sides, reg report.TCPSides
	for i, res := range all {
		s := tcpSides(res)
		sides = sides.Add(s)
		if i > 0 {
			reg = reg.Add(s)
		}
	}
	sum.TCPBySide, sum.RegulatedTCPBySide = &sides, &reg
	regRetrans := reg.Total().RetransSegs
	sum.RegulatedRetrans = &regRetrans
	if wall > 0 {
		sum.AgentCPUPct = round(100*cpu/wall, 2)
		if !bridge {
			sum.ControlCPUPct = round(100*shadowCPU/wall, 2)
			if held > 0 {
				sum.DelayLinePackets = held
				sum.DelayLineUSPerPacket = round(1e6*(cpu-shadowCPU)/float64(held), 1)
			}
		}
		if late.Count > 0 {
			sum.DelayLineLate = lateSummary(late)
		}
	}
	if kind == "autonomic" && !r.opts.NoOracle {
		cfg, err := config.Load(firstCfg)
		if err != nil {
			return nil, err
		}
		judge := func(res *PhaseResult, thr time.Duration) ControlledRun {
			return controlledRun(res, thr, stepsAt, on.Seconds())
		}
		if sum.Oracle, err = runOracle(r, thresholds, cfg.DelayStep, cfg.MaxDelay, mkPhase, judge); err != nil {
			return nil, err
		}
	}
	sum.Judge()
	var refs []report.Line
	for _, t := range thresholds {
		refs = append(refs, report.Line{Name: fmt.Sprintf("%v", t), Y: float64(t) / 1e6})
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "read-wait.png"), fmt.Sprintf("%s: reader's wait per threshold vs no regulation (Fig 5.9/5.11)", name),
		"time (s)", "read wait (ms, EWMA 0.15)", series, refs); err != nil {
		return nil, err
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "write-rate.png"), fmt.Sprintf("%s: aggregate write rate of the %d writers (Fig 5.10/5.12)", name, nw),
		"time (s)", "MB/s (EWMA 0.15)", wseries, nil); err != nil {
		return nil, err
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "delay.png"), name+": write delay applied to the throttleable set (Fig 5.13)",
		"time (s)", "delay (ms)", dseries, nil); err != nil {
		return nil, err
	}
	if len(cseries) > 0 {
		if err := report.TimePlot(filepath.Join(r.Dir, "write-caps.png"), name+": the second lever, sum of the capped writers' write-rate caps (0: none)",
			"time (s)", "MB/s", cseries, nil); err != nil {
			return nil, err
		}
	}
	if !bridge {
		return sum, nil
	}
	bs := BridgeSummary{ControlledSummary: sum, Passive: tracking}
	if len(trackPlot) > 0 {
		return bs, report.TimePlot(filepath.Join(r.Dir, "passive-vs-diskstats.png"),
			fmt.Sprintf("%s: reader's read wait, passive (on the wire, what the agent uses) vs diskstats in bm, threshold %v", name, thresholds[0]),
			"time (s)", "read wait (ms, EWMA 0.15)", trackPlot, nil)
	}
	return bs, nil
}

// scaledWriteMBs is the agent's throttleable_write_mb_s on a modelled
// disk slower or faster than the default: the default's 1 MB/s scaled by
// the bandwidth, so a writer counts as heavy at the same share of the
// disk (the stock-kernel guest's 4 MB/s group: 0.1 MB/s; with the default
// 1 MB/s none of three writers there, ~0.5 MB/s each, was ever slowed).
// 0 where the agent's default applies (default bandwidth, real disk).
func (r *Runner) scaledWriteMBs() float64 {
	if r.State == nil || r.State.Options.RealDisk {
		return 0
	}
	bw, def := r.State.Options.Model.Bandwidth, diskmodel.DefaultParams().Bandwidth
	if bw <= 0 || bw == def {
		return 0
	}
	return round(config.Defaults().WriteMBs*bw/def, 3)
}

// regulatingBackend is the backend the regulated runs' agent uses: the
// delay line unless --agent-set names another.
func (r *Runner) regulatingBackend() string {
	for _, line := range strings.Split(r.opts.AgentYAML, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "backend:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "delayline"
}

// withBackend is agent YAML with its backend line replaced by backend's.
func withBackend(agentYAML, backend string) string {
	var kept []string
	for _, line := range strings.Split(agentYAML, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "backend:") {
			kept = append(kept, line)
		}
	}
	return strings.TrimSpace(strings.TrimSpace(strings.Join(kept, "\n")) + "\nbackend: " + backend)
}

// controlledWriters is the number of writer threads of pid, autonomic and
// the oracle's probes: the thesis' 12 unless the run says otherwise.
func (r *Runner) controlledWriters() int {
	if r.opts.Writers > 0 {
		return r.opts.Writers
	}
	return 12
}

// delaySampler records the agent's applied write delay every second as
// phase events (the agent is the source of truth for what it applied).
// delaySampler samples the agent's throttles every 500 ms: the largest
// write delay (ms) into ys, and the sum of the write-rate caps of the
// second lever (MB/s, 0 with none) into caps.
func delaySampler(a *LabAgent, length time.Duration, xs, ys, caps *[]float64) []Event {
	var ev []Event
	for t := time.Second; t < length; t += 500 * time.Millisecond {
		t := t
		ev = append(ev, Event{At: t, Name: "sample delay", Do: func() error {
			m, err := a.List()
			if err != nil {
				return err
			}
			d, c := 0.0, 0.0
			for _, s := range m {
				d = math.Max(d, float64(s.WriteDelay)/1e6)
				c += float64(s.WriteRate) / 1e6
			}
			*xs = append(*xs, t.Seconds())
			*ys = append(*ys, d)
			*caps = append(*caps, c)
			return nil
		}})
	}
	return ev
}

func controlledRun(res *PhaseResult, thr time.Duration, steps []float64, onS float64) ControlledRun {
	waits := report.Values(res.Window(), "b2", readWait)
	run := ControlledRun{ThresholdMs: float64(thr) / 1e6, ReadWaitMs: roundDist(report.Describe(waits)), WriteMBs: round(report.Aggregate(res.Window(), Hosts[1:], writeMBs), 2), TCP: res.TCP}
	onset := report.FirstSecond(res.Ticks, "b2", Hosts[1:], steps, onS)
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
