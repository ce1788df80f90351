package experiments

import (
	"slices"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// Experiment is one named, reproducible lab run (thesis chapter 5): what
// `sanqos-lab lab run NAME` runs. Each registers its entry from its own file
// (register, registry.go), as node_exporter's collectors do: its name,
// the flags it takes, how it runs and the plots its summary gives.
type Experiment struct {
	Name  string
	Title string // one line, for `lab run --help`
	// DefaultScale is the time scale when the user gives none: short
	// enough for CI, long enough for the figure to mean something.
	DefaultScale float64
	// Flags are the `lab run` flags beyond the lab's own that it takes
	// (flags.go); each flag's help lists the experiments that take it.
	Flags []*Flag
	// Run runs its phases on r and returns what its summary.json holds;
	// a summary returned with an error says what failed. RunExperiment
	// writes the summary and the report. r's context cancels the run:
	// the phase under way stops its load and returns the context's error,
	// which Run returns once it has stopped its agents.
	Run func(r *runner) (any, error)
	// Plots are the figures report.html draws from its summary.json,
	// beside the run's own figures and the trace's.
	Plots []report.SummaryPlot
}

// Takes reports whether the experiment takes flag f.
func (e *Experiment) Takes(f *Flag) bool { return slices.Contains(e.Flags, f) }

// Options are a run's: the lab's (scale, repeats, results) and what the
// experiments' flags set (flags.go says which experiment reads which).
type Options struct {
	lab.RunOptions
	Thresholds    []time.Duration
	ThresholdAuto bool
	AgentYAML     string
	// CompareYAML, if set, runs the regulated phases again with it
	// added to the agent's config, in the same invocation.
	CompareYAML string
	// Writers and Cycles: 0 is the thesis' (12 writers, 6 cycles).
	Writers, Cycles int
	NoOracle        bool
	Streams         int
	LUNMap          bool
	Backends        []string
}
