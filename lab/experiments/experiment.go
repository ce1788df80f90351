package experiments

import (
	"context"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// Experiment is one named, reproducible lab run (thesis chapter 5): what
// `sanqos lab run NAME` runs. Each is a small value in its own file,
// listed once in registry.go.
type Experiment interface {
	// Spec is the experiment's name, one-line description, default
	// scale and the shared flags it takes.
	Spec() Spec
	// Run runs the experiment's phases on r and returns what its
	// summary.json holds; a summary returned with an error says what
	// failed. RunExperiment writes the summary and the report.
	Run(ctx context.Context, r *lab.Runner, o Options) (summary any, err error)
}

// Spec is what an experiment says about itself.
type Spec struct {
	Name  string
	Title string // one line, for `lab run --help`
	// DefaultScale is the time scale when the user gives none: short
	// enough for CI, long enough for the figure to mean something.
	DefaultScale float64
	// Flags are the shared `lab run` flags the experiment takes.
	Flags Flag
}

// Takes reports whether the experiment takes every flag of f.
func (s Spec) Takes(f Flag) bool { return s.Flags&f == f }

// Flag is a set of the shared `lab run` flags, the ones only some
// experiments take.
type Flag uint

// The shared flags. Only --backends is refused by an experiment that does
// not take it (it runs the whole experiment once per backend); the others
// tune what the experiment's agent or load reads and are listed in their
// flag's help.
const (
	FlagThresholds    Flag = 1 << iota // --thresholds
	FlagAgentSet                       // --agent-set
	FlagWriters                        // --writers
	FlagCycles                         // --cycles
	FlagNoOracle                       // --no-oracle
	FlagLUNMap                         // --lun-map
	FlagBackends                       // --backends
	FlagStreams                        // --streams
	FlagThresholdAuto                  // --threshold-auto
)

// Options are a run's: the lab's (scale, repeats, results) and what the
// experiments' shared flags set.
type Options struct {
	lab.RunOptions
	// Thresholds overrides the controlled experiments' thresholds (pid,
	// autonomic, read-backup, mixed).
	Thresholds []time.Duration
	// ThresholdAuto regulates once with threshold: auto instead of the
	// thresholds (controlled experiments): the threshold the agent chose
	// is the run's, and summary.json's threshold_auto says how it chose.
	ThresholdAuto bool
	// AgentYAML is appended to the agent's generated config in pid and
	// autonomic (e.g. "pid: {kp: 1, ti: 200ms}"), for tuning runs.
	AgentYAML string
	// Writers and Cycles override pid's and autonomic's 12 writers and
	// the controlled experiments' 6 on/off cycles (0: the thesis');
	// NoOracle skips the oracle search of autonomic, read-backup and
	// mixed. Together with Scale they shrink a run to what a TCG guest
	// (the stock-kernel tier) can carry.
	Writers, Cycles int
	NoOracle        bool
	// Streams is delay-sweep's fio threads on the swept session's host
	// (0: one, the thesis' single stream): the many-stream read path.
	Streams int
	// LUNMap names each host's own LUN in the autonomic agents' config
	// (consumer_devices): with one tgt target for every host, discovery
	// lists every host on every LUN, and a LUN's queue is nobody's own
	// (docs/interferers.md, "Shared LUNs").
	LUNMap bool
	// Backends runs pid/autonomic's regulated phases once per throttle
	// backend, in this order, in one invocation against one baseline and
	// one oracle, so backends are compared side by side (empty: the
	// backend --agent-set names, else the delay line).
	Backends []string
}

// Taking lists, by name, the experiments that take flag f: the start of
// that flag's help text.
func Taking(f Flag) string {
	var names []string
	for _, e := range All() {
		if e.Spec().Takes(f) {
			names = append(names, e.Spec().Name)
		}
	}
	return strings.Join(names, ", ")
}
