package experiments

import (
	"fmt"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// The oracle answers "how good could any controller be here?": the
// smallest write delay that, applied to every writer from the first packet
// and never changed, holds the reader's p95 at the threshold. It knows the
// load in advance, which the agent does not, so the writes the agent keeps
// against the oracle's measure what finding the delay online costs.
//
// The search bisects over the agent's own delay steps on steady-load
// probes (twelve writers on throughout, the reader beside them): p95 falls
// as the delay grows, so the smallest passing step is found in
// log2(max/step) probes. Probes are cached across thresholds, since one
// delay's p95 answers for all of them. The delay found then runs with the
// experiment's own on/off pattern, so both runs are judged on the same
// load; if that run misses the threshold, the delay is raised and run
// again (report.RaiseUntilHeld).

// oracleProbeLength is a probe's duration before scaling: long enough for
// ~100 read intervals at the default scale, short enough that a search of
// seven probes per threshold costs less than one regulated run.
const oracleProbeLength = 40 * time.Second

// oracleAfterLogin is how long after its sessions log in the oracle sets
// its delay on loads that read. Set before login, the same delay is a
// different lever: the connections' slow start ends early under it and
// the TCP small-queue limit, with packets held in the delay line, then
// lets only a few segments out per delayed round — an 8 KiB read took
// two rounds, a 64 KiB read twelve (lab mixed, 2026-11-26) — while on
// established sessions, the regime the agent works in and a production
// target's sessions live in, every I/O takes one. An oracle in the
// harsher regime answers a question no controller on live sessions can.
// fio logs in when a job starts (its startdelay), so this is measured
// from each on-step; 250 ms covers the logins of the lab's jobs.
const oracleAfterLogin = 250 * time.Millisecond

// oracleSettle is skipped at the start of each probe: fio's login and the
// first writes, which no static delay changes.
const oracleSettle = 2 * time.Second

type oracleSearch struct {
	report.OracleSearch
	r *runner
	// afterLogin: the delay is set oracleAfterLogin after the load's
	// sessions start, not before (loads that read; see above).
	afterLogin bool
	load       *interferers
	a          *lab.LabAgent
}

// probe measures the reader's steady p95 with every writer at d.
func (o *oracleSearch) probe(d time.Duration) (report.OracleProbe, error) {
	r := o.r
	length := max(r.Scale(oracleProbeLength), 4*oracleSettle)
	p := &lab.Phase{Name: fmt.Sprintf("oracle-probe-%v", d), Label: fmt.Sprintf("oracle probe %v", d), Length: length, From: oracleSettle, To: length,
		Jobs: append([]lab.Job{r.reader(length)}, o.load.jobs(r, 0, length)...)}
	if err := o.arm(p, d, []time.Duration{0}, 0); err != nil {
		return report.OracleProbe{}, err
	}
	res, err := r.Run(p, 0)
	if err != nil {
		return report.OracleProbe{}, err
	}
	w := res.Window()
	pr := report.OracleProbe{P95Ms: report.Round(report.Describe(report.Values(w, "b2", readWait)).P95, 2), WriteMBs: report.Round(report.Aggregate(w, lab.Hosts[1:], writeMBs), 2)}
	if o.load.reads {
		pr.ReadMBs = report.Round(report.Aggregate(w, lab.Hosts[1:], readMBs), 2)
	}
	return pr, nil
}

// arm applies delay d to the interferers for phase p: at once, or (after
// login) as p's events oracleAfterLogin after each of the load's starts,
// back to none at each stop (on 0: never).
func (o *oracleSearch) arm(p *lab.Phase, d time.Duration, starts []time.Duration, on time.Duration) error {
	if !o.afterLogin || d == 0 {
		return setInterferers(o.a, o.load, d)
	}
	p.Events = append(p.Events, afterLoginEvents(d, starts, on, func(d time.Duration) error { return setInterferers(o.a, o.load, d) })...)
	return setInterferers(o.a, o.load, 0)
}

// afterLoginEvents are the events that set d oracleAfterLogin after each
// start and 0 at each start + on (on 0: never).
func afterLoginEvents(d time.Duration, starts []time.Duration, on time.Duration, set func(time.Duration) error) []lab.Event {
	var ev []lab.Event
	for _, at := range starts {
		ev = append(ev, lab.Event{At: at + oracleAfterLogin, Name: "oracle delay on", Do: func() error { return set(d) }})
		if on > 0 {
			ev = append(ev, lab.Event{At: at + on, Name: "oracle delay off", Do: func() error { return set(0) }})
		}
	}
	return ev
}

// runOracle searches and runs the oracle for every threshold, with one
// agent driven by hand (the delay line, write delays on replies: what the
// regulated runs use), setting load's static delay on every interferer.
// mkPhase builds the experiment's load pattern.
// s is that pattern's report.Schedule, which an oracle after login follows.
// Where the run at the probes' delay misses the threshold, the delay is
// raised and the load run again (report.RaiseUntilHeld), so the oracle
// the regulated runs are judged against holds what they are asked to.
func runOracle(r *runner, load *interferers, thresholds []time.Duration, step, maxDelay time.Duration, s report.Schedule, mkPhase func(name, label string) *lab.Phase,
	judge func(*lab.PhaseResult, time.Duration) report.ControlledRun) ([]report.OracleRun, error) {
	a, err := lab.StartAgentNamed("oracle", "delayline", r.Dir)
	if err != nil {
		return nil, err
	}
	defer a.Stop()
	o := &oracleSearch{OracleSearch: report.OracleSearch{Step: step, Max: int(maxDelay / step)}, r: r, load: load, a: a, afterLogin: load.reads}
	o.Probe = o.probe
	regime := "first-packet"
	if o.afterLogin {
		regime = "after-login"
	}
	var out []report.OracleRun
	for _, thr := range thresholds {
		or, k, err := o.Find(thr)
		if err != nil {
			return nil, err
		}
		or.Regime = regime
		if or.Reachable {
			if err := o.runHeld(&or, k, thr, s, mkPhase, judge); err != nil {
				return nil, err
			}
		}
		out = append(out, or)
	}
	return out, setInterferers(a, load, 0)
}

// runHeld runs the load pattern from step k up, until a run holds thr or
// the raises are spent, and records every run in or.
func (o *oracleSearch) runHeld(or *report.OracleRun, k int, thr time.Duration, s report.Schedule, mkPhase func(name, label string) *lab.Phase,
	judge func(*lab.PhaseResult, time.Duration) report.ControlledRun) error {
	var starts []time.Duration
	for c := 0; c < s.Cycles; c++ {
		starts = append(starts, s.Start(c))
	}
	last, _, err := report.RaiseUntilHeld(k, o.Max, float64(thr)/1e6, func(k int) (float64, error) {
		d := o.Delay(k)
		p := mkPhase(fmt.Sprintf("oracle-%v-%v", thr, d), fmt.Sprintf("oracle %v (static %v)", thr, d))
		if err := o.arm(p, d, starts, s.On); err != nil {
			return 0, err
		}
		res, err := o.r.Run(p, 0)
		if err != nil {
			return 0, err
		}
		run := judge(res, thr)
		or.Run = &run
		or.Attempts = append(or.Attempts, report.OracleAttempt{DelayMs: report.Round(float64(d)/1e6, 2), P95Ms: run.ReadWaitMs.P95, WriteMBs: run.WriteMBs, ReadMBs: run.ReadMBs})
		return run.ReadWaitMs.P95, nil
	})
	if last != k {
		or.FoundMs, or.DelayMs = or.DelayMs, report.Round(float64(o.Delay(last))/1e6, 2)
	}
	return err
}
