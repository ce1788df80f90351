package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// mixed: autonomic vs VMs' and a database's mixed I/O (issue 30).
type mixed struct{}

func (mixed) Spec() Spec {
	return Spec{Name: "mixed", DefaultScale: 0.25, Flags: FlagThresholds | FlagThresholdAuto | FlagAgentSet | FlagCycles | FlagNoOracle | FlagLUNMap | FlagBackends,
		Title: "autonomic vs VMs and a database: b3-b5 random 8/64 KiB reads and writes (70/30, 50/50), toggled on/off; with the static-delay oracle"}
}

func (mixed) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runControlled(wrap(r, o), "mixed")
}
