package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// pid: PID with given sets under writers toggled on and off (thesis Fig 5.9/5.10).
type pid struct{}

func (pid) Spec() Spec {
	return Spec{Name: "pid", DefaultScale: 0.25, Flags: FlagThresholds | FlagThresholdAuto | FlagAgentSet | FlagWriters | FlagCycles | FlagBackends,
		Title: "PID with given sets holds 10/15/20 ms under 12 writers toggled on/off (Fig 5.9/5.10)"}
}

func (pid) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runControlled(wrap(r, o), "pid")
}
