package experiments

import (
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// delayStepsWrite: Sequential writers throttled stepwise by delayed ACKs (thesis Fig 5.4).
func init() {
	register(&Experiment{Name: "delay-steps-write", DefaultScale: 0.25,
		Title: "Sequential writers throttled stepwise by delayed ACKs, then released (Fig 5.4)", Run: func(r *runner) (any, error) {
			return runSteps(r, "delayline", "write", throttle.Setting{WriteDelay: 4600 * time.Microsecond})
		}})
}
