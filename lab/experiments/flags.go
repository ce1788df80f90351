package experiments

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Flag is one `lab run` flag that only some experiments take. It is
// declared once, where the experiments that read it are, and named in
// each one's Experiment.Flags; AddFlags defines every flag, its help
// starting with the experiments that take it.
type Flag struct {
	name, help string
	def        func(fs *pflag.FlagSet, o *Options, name, help string)
	// given, where set, says o sets the flag: an experiment that does
	// not take it refuses it (the others only tune what an experiment
	// reads, and are ignored where nothing reads them).
	given func(o Options) bool
}

// flags are every Flag, in declaration order.
var flags []*Flag

func newFlag(name, help string, def func(fs *pflag.FlagSet, o *Options, name, help string), given func(Options) bool) *Flag {
	f := &Flag{name: name, help: help, def: def, given: given}
	flags = append(flags, f)
	return f
}

// The flags the controlled experiments share (controlled.go); delay-sweep
// declares its own.
var (
	flagThresholds = newFlag("thresholds", "thresholds to regulate to (default 10ms,15ms,20ms; autonomic adds 5ms)",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.DurationSliceVar(&o.Thresholds, n, nil, h) }, nil)
	// --threshold-auto regulates once with threshold: auto instead of the
	// thresholds: the threshold the agent chose is the run's.
	flagThresholdAuto = newFlag("threshold-auto", "regulate once with threshold: auto instead (no oracle); summary.json has the threshold the agent chose",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.BoolVar(&o.ThresholdAuto, n, false, h) },
		func(o Options) bool { return o.ThresholdAuto })
	// --agent-set is appended to the agent's generated config, for tuning runs.
	flagAgentSet = newFlag("agent-set", "YAML appended to the agent's config, e.g. 'pid: {kp: 1, ti: 200ms}'",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.StringVar(&o.AgentYAML, n, "", h) }, nil)
	// --compare-set is an A/B of configs on one machine at one time: the
	// regulated phases run again with it appended, after the others.
	flagCompareSet = newFlag("compare-set", "run the regulated phases again with this YAML appended to the agent's config (their runs' variant), e.g. 'onset_feedforward: false'",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.StringVar(&o.CompareYAML, n, "", h) },
		func(o Options) bool { return o.CompareYAML != "" })
	// --writers, --cycles and --no-oracle shrink a run, with --scale, to
	// what a TCG guest (the stock-kernel tier) can carry.
	flagWriters = newFlag("writers", "writer threads (default the thesis' 12)",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.IntVar(&o.Writers, n, 0, h) }, nil)
	flagCycles = newFlag("cycles", "the load's on/off cycles (default 6)",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.IntVar(&o.Cycles, n, 0, h) }, nil)
	flagNoOracle = newFlag("no-oracle", "skip the oracle's search for the best static delay",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.BoolVar(&o.NoOracle, n, false, h) }, nil)
	// --lun-map: with one tgt target for every host, discovery lists every
	// host on every LUN, and a LUN's queue is nobody's own
	// (docs/interferers.md, "Shared LUNs").
	flagLUNMap = newFlag("lun-map", "name each host's own LUN in the agent's config (consumer_devices), which discovery cannot tell with one tgt target for every host",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.BoolVar(&o.LUNMap, n, false, h) }, nil)
	// --backends runs the regulated phases once per backend in one
	// invocation, against one baseline and one oracle (backends.go).
	flagBackends = newFlag("backends", "run once per throttle backend (edt, netem, delayline), side by side in one summary",
		func(fs *pflag.FlagSet, o *Options, n, h string) { fs.StringSliceVar(&o.Backends, n, nil, h) },
		func(o Options) bool { return len(o.Backends) > 0 })
)

// AddFlags defines every experiment's flag on fs, setting o.
func AddFlags(fs *pflag.FlagSet, o *Options) {
	for _, f := range flags {
		f.def(fs, o, f.name, Taking(f)+": "+f.help)
	}
}

// Taking lists, by name, the experiments that take flag f: the start of
// that flag's help text.
func Taking(f *Flag) string {
	var names []string
	for _, e := range All() {
		if e.Takes(f) {
			names = append(names, e.Name)
		}
	}
	return strings.Join(names, ", ")
}

// checkFlags refuses a flag that e does not take where the flag says so.
func checkFlags(e *Experiment, o Options) error {
	for _, f := range flags {
		if f.given != nil && f.given(o) && !e.Takes(f) {
			return fmt.Errorf("%s takes no --%s (these do: %s)", e.Name, f.name, Taking(f))
		}
	}
	return nil
}
