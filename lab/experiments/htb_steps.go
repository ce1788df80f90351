package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/throttle"
)

// htbSteps: Sequential readers throttled stepwise by HTB rate classes (thesis Fig 5.2).
type htbSteps struct{}

func (htbSteps) Spec() Spec {
	return Spec{Name: "htb-steps", DefaultScale: 0.25,
		Title: "Sequential readers throttled stepwise by HTB rate classes, then released (Fig 5.2)"}
}

func (htbSteps) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runSteps(wrap(r, o), "htb", "read", throttle.Setting{Rate: 3 << 20})
}
