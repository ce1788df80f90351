package experiments

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sanqos/sanqos/report"
)

// registry is every experiment `sanqos-lab lab run` knows. Adding an
// experiment is adding its file, which registers it.
var registry []*Experiment

// register adds e to the registry and its plots to the report's.
func register(e *Experiment) {
	registry = append(registry, e)
	report.RegisterPlots(e.Name, e.Plots...)
}

// All lists the registered experiments by name.
func All() []*Experiment {
	out := append([]*Experiment(nil), registry...)
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// Help is the list of experiments `sanqos-lab lab run --help` shows: one
// line each, its name and its one-line title.
func Help() string {
	var b strings.Builder
	for _, e := range All() {
		fmt.Fprintf(&b, "  %-18s %s\n", e.Name, e.Title)
	}
	return b.String()
}

// Lookup finds an experiment or says which exist.
func Lookup(name string) (*Experiment, error) {
	var names []string
	for _, e := range All() {
		if e.Name == name {
			return e, nil
		}
		names = append(names, e.Name)
	}
	return nil, fmt.Errorf("unknown experiment %q (have: %s)", name, strings.Join(names, ", "))
}
