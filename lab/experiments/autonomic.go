package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// autonomic: pid's load with sets and indicators discovered (thesis Fig 5.11–5.13).
type autonomic struct{}

func (autonomic) Spec() Spec {
	return Spec{Name: "autonomic", DefaultScale: 0.25, Flags: FlagThresholds | FlagThresholdAuto | FlagAgentSet | FlagWriters | FlagCycles | FlagNoOracle | FlagLUNMap | FlagBackends,
		Title: "Same load, sets and indicators discovered automatically (Fig 5.11–5.13)"}
}

func (autonomic) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runControlled(wrap(r, o), "autonomic")
}
