package experiments

import (
	"github.com/sanqos/sanqos/throttle"
)

// htbSteps: Sequential readers throttled stepwise by HTB rate classes (thesis Fig 5.2).
func init() {
	register(&Experiment{Name: "htb-steps", DefaultScale: 0.25,
		Title: "Sequential readers throttled stepwise by HTB rate classes, then released (Fig 5.2)", Run: func(r *runner) (any, error) { return runSteps(r, "htb", "read", throttle.Setting{Rate: 3 << 20}) }})
}
