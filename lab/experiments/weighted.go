package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// weighted: Three writers weighted 4:2:1 plus the small reader.
type weighted struct{}

func (weighted) Spec() Spec {
	return Spec{Name: "weighted", DefaultScale: 1,
		Title: "Three writers weighted 4:2:1 plus the small reader: agent off vs the weighted policy at max_delay 20 and 50 ms"}
}

func (weighted) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runWeightedLab(wrap(r, o))
}
