package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// throttleEffect: Fixed write delays on the writers lower the reader's wait (thesis Fig 5.8).
type throttleEffect struct{}

func (throttleEffect) Spec() Spec {
	return Spec{Name: "throttle-effect", DefaultScale: 0.25, Flags: FlagWriters | FlagBackends,
		Title: "Fixed 4.6 ms and 9.6 ms write delays on 12 writers lower the reader's wait (Fig 5.8)"}
}

func (throttleEffect) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	rr := wrap(r, o)
	return rr.eachBackend("throttle-effect", rr.throttleEffect)
}
