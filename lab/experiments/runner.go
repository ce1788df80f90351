package experiments

import (
	"cmp"
	"context"
	"fmt"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// runner is what every experiment runs on: the lab's Runner (phases,
// trace.csv, summary.json, progress) with the run's Options, and the CPU
// of the agents it started (backends.go). The experiments' shared
// machinery hangs off it: the same-run baseline and the oracle
// (controlled.go, oracle.go), backends side by side (backends.go), the
// agent's config (agentconfig.go).
type runner struct {
	*lab.Runner
	opts Options
	use  lab.AgentUse
}

// wrap is the runner of an experiment's Run.
func wrap(r *lab.Runner, o Options) *runner { return &runner{Runner: r, opts: o} }

// RunExperiment runs experiment name on the lab and returns its results
// directory, where it leaves trace.csv, the phases' fio files, its
// summary.json and report.html, whatever the experiment: the part every
// experiment shares, written once.
func RunExperiment(ctx context.Context, name string, o Options) (string, error) {
	e, err := Lookup(name)
	if err != nil {
		return "", err
	}
	if o, err = checkOptions(e, o); err != nil {
		return "", err
	}
	r, err := lab.NewRunner(ctx, name, o.RunOptions)
	if err != nil {
		return "", err
	}
	defer r.Close()
	return r.Dir, runOn(e, r, o)
}

// checkOptions fills in e's default scale and refuses what the run cannot
// take: a scale, repeat, writers or cycles out of range, --backends or
// --threshold-auto for an experiment that takes none (checkFlags), a
// backend of no name.
func checkOptions(e *Experiment, o Options) (Options, error) {
	o.Scale = cmp.Or(o.Scale, e.DefaultScale)
	if o.Scale < 0.01 || o.Scale > 10 {
		return o, fmt.Errorf("scale %v: want 0.01..10", o.Scale)
	}
	if o.Repeat < 0 || o.Repeat > 50 {
		return o, fmt.Errorf("repeat %d: want 1..50", o.Repeat)
	}
	if o.Writers < 0 || o.Writers > 48 || o.Cycles < 0 || o.Cycles > 50 {
		return o, fmt.Errorf("writers %d, cycles %d: want 0 (default) or 1..48 writers, 1..50 cycles", o.Writers, o.Cycles)
	}
	if err := checkFlags(e, o); err != nil {
		return o, err
	}
	return o, checkBackends(o.Backends)
}

// runOn runs e on r and writes what every run leaves besides its trace:
// summary.json and the one-page report.
func runOn(e *Experiment, r *lab.Runner, o Options) error {
	sum, err := e.Run(wrap(r, o))
	if sum != nil {
		// A summary that comes with an error says what failed.
		werr := r.WriteSummary(sum)
		if err == nil {
			err = werr
		}
		// The one-page report (figures + summary table) of every run with
		// a summary, failed ones included: what `sanqos-lab report DIR` writes.
		// A run's own error comes first.
		if werr == nil {
			if _, rerr := report.Generate(r.Dir); err == nil && rerr != nil {
				err = fmt.Errorf("report: %w", rerr)
			}
		}
	}
	return err
}
