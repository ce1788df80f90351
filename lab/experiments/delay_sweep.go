package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// delaySweep: Rate vs added delay on an established session (thesis Fig 5.5/5.6).
type delaySweep struct{}

func (delaySweep) Spec() Spec {
	return Spec{Name: "delay-sweep", DefaultScale: 0.25, Flags: FlagBackends,
		Title: "Rate vs added delay 0–9.6 ms on an established session, reads and writes, repeated (Fig 5.5/5.6)"}
}

func (delaySweep) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	rr := wrap(r, o)
	return rr.eachBackend("delay-sweep", rr.delaySweepSession)
}
