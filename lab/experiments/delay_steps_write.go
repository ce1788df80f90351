package experiments

import (
	"context"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/throttle"
)

// delayStepsWrite: Sequential writers throttled stepwise by delayed ACKs (thesis Fig 5.4).
type delayStepsWrite struct{}

func (delayStepsWrite) Spec() Spec {
	return Spec{Name: "delay-steps-write", DefaultScale: 0.25,
		Title: "Sequential writers throttled stepwise by delayed ACKs, then released (Fig 5.4)"}
}

func (delayStepsWrite) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runSteps(wrap(r, o), "delayline", "write", throttle.Setting{WriteDelay: 4600 * time.Microsecond})
}
