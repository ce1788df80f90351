package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// bridgeAutonomic: autonomic with the agent on the bridge (thesis 6.9).
type bridgeAutonomic struct{}

func (bridgeAutonomic) Spec() Spec {
	return Spec{Name: "bridge-autonomic", DefaultScale: 0.25, Flags: FlagThresholds | FlagAgentSet | FlagWriters | FlagCycles,
		Title: "autonomic's load with the agent on the bridge (sqlan): FORWARD throttling, passive iSCSI latency only (thesis 6.9)"}
}

func (bridgeAutonomic) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runControlled(wrap(r, o), "bridge-autonomic")
}
