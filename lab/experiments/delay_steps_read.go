package experiments

import (
	"context"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/throttle"
)

// delayStepsRead: Sequential readers throttled stepwise by packet delay (thesis Fig 5.3).
type delayStepsRead struct{}

func (delayStepsRead) Spec() Spec {
	return Spec{Name: "delay-steps-read", DefaultScale: 0.25,
		Title: "Sequential readers throttled stepwise by packet delay, then released (Fig 5.3)"}
}

func (delayStepsRead) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runSteps(wrap(r, o), "delayline", "read", throttle.Setting{ReadDelay: 4600 * time.Microsecond})
}
