package experiments

import (
	"fmt"
	"sort"
	"strings"
)

// registry is every experiment `sanqos lab run` knows, in the order of
// the thesis and the issues that added them. Adding an experiment is
// adding its file and its line here.
var registry = []Experiment{
	equalShare{},
	htbSteps{},
	delayStepsRead{},
	delayStepsWrite{},
	delaySweep{},
	delaySweepFresh{},
	interference{},
	throttleEffect{},
	pid{},
	autonomic{},
	overhead{},
	overheadInterleaved{},
	bridgeAutonomic{},
	clusterAutonomic{},
	htbShares{},
	reservations{},
	sloClasses{},
	weighted{},
	importantSets{},
	readBackup{},
	mixed{},
	reliability{},
}

// All lists the registered experiments by name.
func All() []Experiment {
	out := append([]Experiment(nil), registry...)
	sort.Slice(out, func(i, k int) bool { return out[i].Spec().Name < out[k].Spec().Name })
	return out
}

// Help is the list of experiments `sanqos lab run --help` shows: one
// line each, its name and its one-line title.
func Help() string {
	var b strings.Builder
	for _, e := range All() {
		fmt.Fprintf(&b, "  %-18s %s\n", e.Spec().Name, e.Spec().Title)
	}
	return b.String()
}

// Lookup finds an experiment or says which exist.
func Lookup(name string) (Experiment, error) {
	var names []string
	for _, e := range All() {
		if e.Spec().Name == name {
			return e, nil
		}
		names = append(names, e.Spec().Name)
	}
	return nil, fmt.Errorf("unknown experiment %q (have: %s)", name, strings.Join(names, ", "))
}
