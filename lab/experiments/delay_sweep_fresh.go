package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// delaySweepFresh: Rate vs delay with a new iSCSI session per point.
type delaySweepFresh struct{}

func (delaySweepFresh) Spec() Spec {
	return Spec{Name: "delay-sweep-fresh", DefaultScale: 0.25, Flags: FlagBackends,
		Title: "Rate vs delay when every point opens a new iSCSI session (shows CUBIC HyStart's early exit)"}
}

func (delaySweepFresh) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	rr := wrap(r, o)
	return rr.eachBackend("delay-sweep-fresh", rr.delaySweepFresh)
}
