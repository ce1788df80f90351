package labcli

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/internal/editdist"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sim"
	"github.com/spf13/cobra"
)

// simFlags are shared by the scenario commands.
type simFlags struct {
	seed       uint64
	scale      float64
	params     string
	agentYAML  string
	thresholds []time.Duration
	results    string
}

func (f *simFlags) add(c *cobra.Command) {
	c.Flags().Uint64Var(&f.seed, "seed", 1, "random seed (same seed, same summary.json)")
	c.Flags().Float64Var(&f.scale, "scale", 1, "durations = thesis' × scale")
	c.Flags().StringVar(&f.params, "params", "", "`FILE` of model parameters (params.json from sim calibrate); default: built-in")
	c.Flags().StringVar(&f.agentYAML, "agent-yaml", "", "`FILE` with extra agent config (e.g. the pid block from sanqos-lab tune)")
	c.Flags().DurationSliceVar(&f.thresholds, "thresholds", nil, "pid/autonomic thresholds (empty: 10ms,15ms,20ms)")
	c.Flags().StringVar(&f.results, "results", "results", "results directory; runs go to RESULTS/sim-NAME/RUN-ID/")
}

func (f *simFlags) options() (sim.Options, error) {
	o := sim.DefaultOptions()
	o.Seed, o.Scale, o.Thresholds = f.seed, f.scale, f.thresholds
	if f.params != "" {
		p, err := sim.LoadParams(f.params)
		if err != nil {
			return o, err
		}
		o.Params = p
	}
	if f.agentYAML != "" {
		b, err := os.ReadFile(f.agentYAML)
		if err != nil {
			return o, err
		}
		o.AgentYAML = string(b)
	}
	return o, nil
}

// runDir makes RESULTS/NAME/RUN-ID and points RESULTS/NAME/latest at it.
func runDir(results, name string) (string, error) {
	id := time.Now().UTC().Format("20060102-150405")
	dir := filepath.Join(results, name, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lab.LinkLatest(results, name, id)
	return dir, nil
}

// saveSummary writes v as RESULTS/NAME/RUN-ID/summary.json and returns
// the run's directory.
func saveSummary(results, name string, v any) (string, error) {
	dir, err := runDir(results, name)
	if err != nil {
		return "", err
	}
	return dir, lab.WriteJSON(filepath.Join(dir, "summary.json"), v)
}

func simCmd() *cobra.Command {
	var f simFlags
	c := &cobra.Command{
		Use:   "sim SCENARIO",
		Short: "Run a lab experiment in the simulator (no root, faster than real time)",
		Long: `Runs the real agent (indicator, EWMA, PID, throttleable sets, actuator)
against a deterministic discrete-event model of initiators, TCP and a shared
disk, under a virtual clock. Scenarios: ` + strings.Join(sim.Names(), ", ") + `.
Writes summary.json (the lab's format), trace.csv, loop.csv (the agent's
setpoint and indicator per tick) and plots to RESULTS/sim-SCENARIO/RUN-ID/, and sim.json with the wall time and speed-up
(kept out of summary.json, which is byte-identical for a seed).`,
		Example: `  sanqos-lab sim autonomic
  sanqos-lab sim pid --params results/sim-calibration/latest/params.json --agent-yaml tuned.yaml
  sanqos-lab sim interference --seed 7 --scale 0.25
  sanqos-lab sim read-backup --thresholds 15ms`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			if sim.Scenarios[args[0]] == nil {
				return unknownScenario(cmd, args[0])
			}
			if o.Out, err = runDir(f.results, "sim-"+args[0]); err != nil {
				return err
			}
			t0, s0 := time.Now(), sim.Simulated()
			sum, err := sim.Run(args[0], o)
			if err != nil {
				return err
			}
			info := sim.RunInfo(args[0], o, sim.Simulated()-s0, time.Since(t0))
			if err := lab.WriteJSON(filepath.Join(o.Out, "sim.json"), info); err != nil {
				return err
			}
			// The same one-page report as a lab run's (after sim.json, so
			// it lists the run's metadata too).
			if _, err := report.Generate(o.Out); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			printSummary(cmd, sum)
			fmt.Fprintf(cmd.OutOrStdout(), "simulated %.0f s in %.2f s wall (%.0f× real time)\n%s\n", info.SimulatedS, info.WallS, info.SpeedUp, o.Out)
			return nil
		},
	}
	f.add(c)
	c.AddCommand(simCalibrateCmd(), simScaleCmd(), simClusterScaleCmd())
	return c
}

// unknownScenario says that name is neither a scenario nor a command of
// sim, and names the nearest of both.
func unknownScenario(cmd *cobra.Command, name string) error {
	near := cli.SuggestCommands(cmd, name)
	for _, s := range sim.Names() {
		if editdist.Distance(name, s) <= 2 {
			near = append(near, s)
		}
	}
	msg := fmt.Sprintf("no scenario or command %q (scenarios: %s)", name, strings.Join(sim.Names(), ", "))
	if len(near) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(near, "\n\t")
	}
	return cli.Usagef("%s", msg)
}

func printSummary(cmd *cobra.Command, sum any) {
	w := cmd.OutOrStdout()
	switch s := sum.(type) {
	case report.InterferenceSummary:
		for _, r := range s.Runs {
			fmt.Fprintf(w, "%2d writers: read wait p95 %6.2f ms  mean %6.2f ms  writes %6.2f MB/s\n", r.Writers, r.ReadWaitMs.P95, r.ReadWaitMs.Mean, r.WriteMBs)
		}
	case report.ControlledSummary:
		printControlled(w, s)
	default:
		b, _ := sim.MarshalSummary(sum)
		w.Write(b)
	}
}

// printControlled prints a controlled summary: what the interferers
// (writers, a backup, mixed I/O) moved in both directions, and the
// oracle's static delay beside each threshold's agent run.
func printControlled(w io.Writer, s report.ControlledSummary) {
	moved := func(r report.ControlledRun) float64 { return r.ReadMBs + r.WriteMBs }
	fmt.Fprintf(w, "baseline:        read wait p95 %6.2f ms  %s %6.2f MB/s (reads %.2f, writes %.2f)\n",
		s.Baseline.ReadWaitMs.P95, cmp.Or(s.Interferers, "writers"), moved(s.Baseline), s.Baseline.ReadMBs, s.Baseline.WriteMBs)
	for _, r := range s.Regulated {
		kept := 0.0
		if b := moved(s.Baseline); b > 0 {
			kept = 100 * moved(r) / b
		}
		fmt.Fprintf(w, "threshold %2.0f ms: read wait p95 %6.2f ms (%.2f×)  moved %6.2f MB/s (%3.0f%% kept)  above 1.2×: %5.2f%%  settle %5.2f s  max delay %4.1f ms\n",
			r.ThresholdMs, r.ReadWaitMs.P95, r.ReadWaitMs.P95/r.ThresholdMs, moved(r), kept, r.PctAbove, r.SettleS, r.MaxDelay)
		printEventDigest(w, r.Events)
	}
	for _, o := range s.Oracle {
		if o.Run == nil {
			p95 := 0.0
			for _, p := range o.Probes {
				if p.DelayMs == o.DelayMs {
					p95 = p.P95Ms
				}
			}
			fmt.Fprintf(w, "oracle    %2.0f ms: not reachable: p95 %.2f ms at the largest static delay, %.1f ms\n", o.ThresholdMs, p95, o.DelayMs)
			continue
		}
		fmt.Fprintf(w, "oracle    %2.0f ms: read wait p95 %6.2f ms (%.2f×)  moved %6.2f MB/s  static delay %.1f ms (%d probes)\n",
			o.ThresholdMs, o.Run.ReadWaitMs.P95, o.Run.ReadWaitMs.P95/o.ThresholdMs, moved(*o.Run), o.DelayMs, len(o.Probes))
	}
}

func simCalibrateCmd() *cobra.Command {
	var seed uint64
	var out string
	c := &cobra.Command{
		Use:   "calibrate RESULTS",
		Short: "Fit the model to lab runs under RESULTS and report the simulated-vs-lab p95 error",
		Long: `Reads the newest usable interference, delay-sweep and pid runs under RESULTS
(the lab's results directory), fits the model (TCP windows from the delay
sweep by least squares; disk write cost, block-stack latency and write wire
rate by coordinate descent on simulated interference runs) and compares the
calibrated simulator's interference and pid p95 read waits with the lab's.
Writes params.json (for --params) and calibration.json.`,
		Example: `  sanqos-lab sim calibrate results
  sanqos-lab sim pid --params results/sim-calibration/latest/params.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lr, err := sim.FindLabRuns(args[0])
			if err != nil {
				return err
			}
			cal, err := sim.Calibrate(lr, seed)
			if err != nil {
				return err
			}
			dir := out
			if dir == "" {
				if dir, err = runDir(args[0], "sim-calibration"); err != nil {
					return err
				}
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := lab.WriteJSON(filepath.Join(dir, "params.json"), cal.Params); err != nil {
				return err
			}
			if err := lab.WriteJSON(filepath.Join(dir, "calibration.json"), cal); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "lab runs: %s, %s, %s\n", lr.InterferenceDir, lr.DelaySweepDir, lr.PIDDir)
			for _, m := range cal.Method {
				fmt.Fprintln(w, "  "+m)
			}
			for _, group := range []struct {
				name string
				cs   []sim.Compare
				err  float64
			}{{"interference", cal.Interference, cal.InterferenceErrPct}, {"pid", cal.PID, cal.PIDErrPct}} {
				if len(group.cs) == 0 {
					continue
				}
				fmt.Fprintf(w, "%s (p95 read wait, lab vs sim):\n", group.name)
				for _, x := range group.cs {
					fmt.Fprintf(w, "  %-16s %6.2f vs %6.2f ms (%+5.1f%%)   writes %6.2f vs %6.2f MB/s (%+5.1f%%)\n", x.Case, x.LabP95, x.SimP95, x.ErrPct, x.LabWrite, x.SimWrite, x.WriteErrPc)
				}
				fmt.Fprintf(w, "  mean |p95 error| %.1f%%\n", group.err)
			}
			fmt.Fprintln(w, dir)
			return nil
		},
	}
	c.Flags().Uint64Var(&seed, "seed", 1, "random seed of the simulated runs")
	c.Flags().StringVar(&out, "out", "", "output directory (default RESULTS/sim-calibration/RUN-ID)")
	return c
}

func simScaleCmd() *cobra.Command {
	so := sim.DefaultScale()
	var results string
	c := &cobra.Command{
		Use:   "scale",
		Short: "One agent, 1,000 resources, 10,000 consumers, 100 ms ticks: tick CPU, memory, time to throttleable",
		Long: `Runs the real agent code (discovery snapshots, per-resource indicators,
PIDs, throttleable sets, actuator) stepped by the simulator over 1,000
simulated resources and 10,000 consumers whose writers start and stop, and
measures the agent's CPU per tick, its heap and garbage per tick, and how
long a consumer that starts writing takes to enter its resource's
throttleable set (on a session discovery already knows, and on a new one).
Writes RESULTS/sim-scale/RUN-ID/summary.json. scripts/bench.sh runs this
with the Go benchmarks and the kernel-side measurements to regenerate
BENCHMARKS.md.`,
		Example: `  sanqos-lab sim scale
  sanqos-lab sim scale --resources 100 --consumers-per-resource 10 --length 20s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sim.RunScale(so)
			if err != nil {
				return err
			}
			dir, err := saveSummary(results, "sim-scale", s)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%d resources, %d consumers, %d ticks\n", s.Resources, s.Consumers, s.Ticks)
			fmt.Fprintf(w, "tick: wall mean %.2f ms p95 %.2f ms; process CPU %.2f ms/tick\n", s.TickWallMs.Mean, s.TickWallMs.P95, s.TickCPUMs)
			fmt.Fprintf(w, "agent heap %.1f MB, garbage %.2f MB/tick\n", s.AgentHeapMB, s.AllocPerTickMB)
			fmt.Fprintf(w, "time to throttleable, known session: p50 %.0f ms p95 %.0f ms max %.0f ms (%d writers)\n",
				s.KnownToThrottleableMs.P50, s.KnownToThrottleableMs.P95, s.KnownToThrottleableMs.Max, s.KnownToThrottleableMs.N)
			fmt.Fprintf(w, "time to throttleable, new session: p50 %.0f ms p95 %.0f ms max %.0f ms (%d writers; discovery every %v)\n",
				s.TimeToThrottleableMs.P50, s.TimeToThrottleableMs.P95, s.TimeToThrottleableMs.Max, s.TimeToThrottleableMs.N, time.Second)
			fmt.Fprintf(w, "  of which after discovery: p50 %.0f ms p95 %.0f ms max %.0f ms\n", s.FromDiscoveryMs.P50, s.FromDiscoveryMs.P95, s.FromDiscoveryMs.Max)
			fmt.Fprintf(w, "%d/%d late writers detected\n", s.LateWritersDetected, s.LateWriters)
			fmt.Fprintln(w, dir)
			return nil
		},
	}
	c.Flags().IntVar(&so.Resources, "resources", so.Resources, "resources")
	c.Flags().IntVar(&so.PerResource, "consumers-per-resource", so.PerResource, "consumers per resource")
	c.Flags().DurationVar(&so.Length, "length", so.Length, "simulated time")
	c.Flags().Uint64Var(&so.Seed, "seed", so.Seed, "random seed")
	c.Flags().StringVar(&results, "results", "results", "results directory")
	return c
}

// simClusterScaleCmd is `sim cluster-scale`: its help text, its flag
// table and a short RunE, one function as every command of this binary is
// (the flags' variables are the RunE's closure).
func simClusterScaleCmd() *cobra.Command {
	o := sim.DefaultClusterScale()
	var results string
	c := &cobra.Command{
		Use:   "cluster-scale",
		Short: "100 agents, 1,000 shared resources, 10,000 consumers on a modelled etcd: propagation times, per-agent and etcd load",
		Long: `Runs package cluster's own per-tick code (the follower's and the leader's
rules, the shared PID, the indicator and record encodings, policy validation
and merge) for every agent of a SAN, on virtual time, against a model of
etcd (client latency, group commit, apply cost, watches, leases) and of the
cluster node's goroutines (publisher, watches, campaigns). Each resource is
behind --spread agents; its writer starts and stops, so shared steps move.

Measures how long a policy takes to reach every agent, how long a leader's
shared step takes to be applied by every agent of its resource, each agent's
CPU per tick in that code and its etcd traffic, etcd's total load beside
the same figures derived on paper, and two failures: the busiest leader
killed (fallback, failover) and etcd lost (fallback, decay to zero).
Writes RESULTS/sim-cluster-scale/RUN-ID/summary.json. The virtual-time
figures are the same for a seed; the CPU figures time this machine.`,
		Example: `  sanqos-lab sim cluster-scale
  sanqos-lab sim cluster-scale --agents 10 --resources 50 --consumers 500 --length 15s --kill-at 5s --outage-at 9s
  sanqos-lab sim cluster-scale --etcd-one-way 5ms --etcd-commit 10ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t0 := time.Now()
			s, err := sim.RunClusterScale(o)
			if err != nil {
				return err
			}
			wall := time.Since(t0)
			dir, err := saveSummary(results, "sim-cluster-scale", s)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%d agents, %d resources (%g per agent, %d agents each), %d consumers; formed in %.0f ms\n",
				s.Agents, s.Resources, s.ResourcesPerAgent.Mean, s.Spread, s.Consumers, s.FormedMs)
			fmt.Fprintf(w, "policy to every agent: p50 %.1f ms p95 %.1f ms max %.1f ms (%d changes, all applied: %v); in effect by max %.0f ms; merge CPU p50 %.1f ms\n",
				s.PolicyPropagationMs.P50, s.PolicyPropagationMs.P95, s.PolicyPropagationMs.Max, s.PolicyChanges, s.PolicyAppliedByAll,
				s.PolicyInEffectMs.Max, s.PolicyApplyCPUMs.P50)
			fmt.Fprintf(w, "shared step to every agent of its resource: p50 %.0f ms p95 %.0f ms max %.0f ms (%d records); delivered p50 %.1f ms p95 %.1f ms\n",
				s.SharedPropagationMs.P50, s.SharedPropagationMs.P95, s.SharedPropagationMs.Max, s.SharedRecords, s.SharedDeliveredMs.P50, s.SharedDeliveredMs.P95)
			fmt.Fprintf(w, "per agent: CPU %.0f µs/tick (p95 over agents %.0f), %.0f puts/s, %.0f watch events/s, %.1f kB/s out, %.1f kB/s in; leads %.0f-%.0f resources\n",
				s.AgentCPUPerTickUs.Mean, s.AgentCPUPerTickUs.P95, s.AgentPutsPerS.Mean, s.AgentEventsPerS.Mean,
				s.AgentBytesOutPerS.Mean/1e3, s.AgentBytesInPerS.Mean/1e3, s.ResourcesLed.P50, s.ResourcesLed.Max)
			fmt.Fprintf(w, "etcd: %.0f puts/s in %.0f write requests/s, %.0f watch events/s, %d keys, %d leases, apply utilisation %.1f %%\n",
				s.EtcdPutsPerS, s.EtcdTxnsPerS, s.EtcdEventsPerS, s.EtcdKeys, s.EtcdLeases, 100*s.EtcdUtilisation)
			for _, e := range s.PaperVsModel {
				paper := fmt.Sprintf("%.0f", e.PaperLow)
				if e.PaperHigh != e.PaperLow {
					paper = fmt.Sprintf("%.0f-%.0f", e.PaperLow, e.PaperHigh)
				}
				fmt.Fprintf(w, "  %-26s paper %-13s model %.0f\n", e.Quantity, paper, e.Model)
			}
			if s.Killed != "" {
				fmt.Fprintf(w, "leader %s (%d resources) killed: followers local after max %.0f ms (max %.0f ms after their last record), new leader followed after p50 %.0f ms max %.0f ms\n",
					s.Killed, s.KilledLed, s.FallbackMs.Max, s.FallbackSinceRecMs.Max, s.FailoverMs.P50, s.FailoverMs.Max)
			}
			if s.OutageFallbackMs.N > 0 {
				fmt.Fprintf(w, "etcd lost: every agent local after max %.0f ms, shared step decayed to zero after max %.0f ms (%d not decayed)\n",
					s.OutageFallbackMs.Max, s.OutageDecayMs.Max, s.OutageNotDecayed)
			}
			fmt.Fprintf(w, "simulated %.0f s in %.1f s wall\n%s\n", s.SimulatedS, wall.Seconds(), dir)
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Agents, "agents", o.Agents, "agents (target hosts)")
	f.IntVar(&o.Resources, "resources", o.Resources, "shared resources")
	f.IntVar(&o.Consumers, "consumers", o.Consumers, "consumers (each through one agent)")
	f.IntVar(&o.Spread, "spread", o.Spread, "agents serving each resource")
	f.DurationVar(&o.Length, "length", o.Length, "simulated time")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed")
	f.IntVar(&o.Policies, "policies", o.Policies, "policy changes")
	f.DurationVar(&o.PolicyFrom, "policy-from", o.PolicyFrom, "first policy change")
	f.DurationVar(&o.PolicyEvery, "policy-every", o.PolicyEvery, "time between policy changes")
	f.DurationVar(&o.Warmup, "warmup", o.Warmup, "rates are counted from here to --kill-at")
	f.DurationVar(&o.KillAt, "kill-at", o.KillAt, "the busiest leader dies (0: never)")
	f.DurationVar(&o.OutageAt, "outage-at", o.OutageAt, "etcd stops answering until the end (0: never)")
	f.DurationVar(&o.Etcd.OneWay, "etcd-one-way", o.Etcd.OneWay, "median agent-etcd latency, each way")
	f.DurationVar(&o.Etcd.Commit, "etcd-commit", o.Etcd.Commit, "median commit time (member round trip + WAL fdatasync)")
	f.DurationVar(&o.Etcd.ApplyCost, "etcd-apply", o.Etcd.ApplyCost, "etcd server time per write request (capacity = 1/this)")
	f.StringVar(&results, "results", "results", "results directory")
	return c
}

// printEventDigest prints, under a regulated run, whom the agent slowed
// and why: per consumer its events by kind, the directions it was slowed
// in, and why it was slowed (summary.json's events; the whole history is
// the run's events-PHASE.json).
func printEventDigest(w io.Writer, d *report.ThrottleEvents) {
	if d == nil {
		return
	}
	for _, c := range d.Consumers {
		var kinds []string
		for _, k := range agent.EventKinds {
			if n := c.Kinds[string(k)]; n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
			}
		}
		var why []string
		for r := range c.Reasons {
			if !strings.HasPrefix(r, "held") && !strings.HasPrefix(r, "released") && !strings.HasPrefix(r, "direction") && !strings.HasPrefix(r, "left") {
				why = append(why, r)
			}
		}
		sort.Strings(why)
		dirs := ""
		if len(c.Directions) > 0 {
			dirs = " (" + strings.Join(c.Directions, ", ") + ")"
		}
		fmt.Fprintf(w, "  %-15s %s%s: %s\n", c.Consumer, strings.Join(kinds, ", "), dirs, strings.Join(why, "; "))
	}
}
