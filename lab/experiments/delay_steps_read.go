package experiments

import (
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// delayStepsRead: Sequential readers throttled stepwise by packet delay (thesis Fig 5.3).
func init() {
	register(&Experiment{Name: "delay-steps-read", DefaultScale: 0.25,
		Title: "Sequential readers throttled stepwise by packet delay, then released (Fig 5.3)", Run: func(r *runner) (any, error) {
			return runSteps(r, "delayline", "read", throttle.Setting{ReadDelay: 4600 * time.Microsecond})
		}})
}
