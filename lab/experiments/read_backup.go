package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// readBackup: autonomic vs a backup's sequential readers (issue 30).
type readBackup struct{}

func (readBackup) Spec() Spec {
	return Spec{Name: "read-backup", DefaultScale: 0.25, Flags: FlagThresholds | FlagThresholdAuto | FlagAgentSet | FlagCycles | FlagNoOracle | FlagLUNMap | FlagBackends,
		Title: "autonomic vs a backup: b3-b5 read sequentially, 64 KiB, 4 streams each, toggled on/off; with the static-delay oracle"}
}

func (readBackup) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runControlled(wrap(r, o), "read-backup")
}
