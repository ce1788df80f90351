package sim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// The oracle mirrors lab/experiments/oracle.go on the model: the smallest static
// delay that, applied to every interferer from the first request and
// never changed, holds the reader's p95 at the threshold. It knows the
// load in advance, which the agent does not, so what the agent's runs
// keep against it measures what finding the delay online costs.
//
// The delay is the same in both directions (read delay on data, write
// delay on ACKs), so one search serves backups, writers and mixes alike:
// in the model a direction a host does not use costs it nothing. The
// search bisects over the agent's own delay steps up to its max_delay on
// steady-load probes (every interferer on throughout, the reader beside
// them), caching probes across thresholds; the delay found then runs
// with the experiment's own on/off pattern.

// oracleProbeLength and oracleSettle are the lab's: a probe's duration
// before scaling, and the start of each probe left out of its figures.
const (
	oracleProbeLength = 40 * time.Second
	oracleSettle      = 2 * time.Second
)

// staticDelay is delay d in both directions on every interferer host.
func staticDelay(d time.Duration) map[netip.Addr]throttle.Setting {
	if d == 0 {
		return nil
	}
	m := map[netip.Addr]throttle.Setting{}
	for _, h := range Hosts[1:] {
		m[HostAddr(h)] = throttle.Setting{ReadDelay: d, WriteDelay: d}
	}
	return m
}

// probe measures the reader's steady p95 with every interferer at d.
// Every probe runs on the run's seed, so the bisection compares delays
// rather than random draws.
func probe(o Options, ld load, d time.Duration) (report.OracleProbe, error) {
	length := max(o.scale(oracleProbeLength), 4*oracleSettle)
	p := labPhase(fmt.Sprintf("oracle-probe-%v", d), fmt.Sprintf("oracle probe %v", d), length, oracleSettle, length)
	p.Jobs = append([]*Job{reader(length)}, ld(0, 0, 0)...)
	p.Fixed = staticDelay(d)
	res, err := RunPhase(p, o.Params, o.Seed)
	if err != nil {
		return report.OracleProbe{}, err
	}
	w := res.Window()
	return report.OracleProbe{P95Ms: report.Round(report.Describe(report.Values(w, "b2", readWait)).P95, 2),
		WriteMBs: report.Round(report.Aggregate(w, Hosts[1:], writeMBs), 2), ReadMBs: report.Round(report.Aggregate(w, Hosts[1:], readMBs), 2)}, nil
}

// runOracle searches and runs the oracle for every threshold, over the
// delay steps of the agent's config (so --agent-yaml's max_delay bounds
// the oracle as it bounds the agent). Each oracle run takes the seed of
// the agent's run at the same threshold: the same load, draw for draw,
// until the two runs' delays part them.
func runOracle(o Options, c *controlled, thresholds []time.Duration) ([]report.OracleRun, []*PhaseResult, error) {
	cfg, _, err := agentConfig(thresholds[0], c.autonomic, o.AgentYAML)
	if err != nil {
		return nil, nil, err
	}
	s := &report.OracleSearch{Step: cfg.DelayStep, Max: int(cfg.MaxDelay / cfg.DelayStep),
		Probe: func(d time.Duration) (report.OracleProbe, error) { return probe(o, c.load, d) }}
	var out []report.OracleRun
	var runs []*PhaseResult
	for i, thr := range thresholds {
		or, k, err := s.Find(thr)
		if err != nil {
			return nil, nil, err
		}
		if d := s.Delay(k); or.Reachable {
			p, steps, err := controlledPhase(o, 0, c.autonomic, c.load)
			if err != nil {
				return nil, nil, err
			}
			p.Name, p.Label, p.Fixed = fmt.Sprintf("oracle-%v", thr), fmt.Sprintf("oracle %v (static %v)", thr, d), staticDelay(d)
			res, err := RunPhase(p, o.Params, o.Seed+uint64(i+1))
			if err != nil {
				return nil, nil, err
			}
			run := ControlledRunOf(res, thr, steps, o.onS())
			or.Run, runs = &run, append(runs, res)
		}
		out = append(out, or)
	}
	return out, runs, nil
}
