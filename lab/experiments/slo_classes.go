package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// sloClasses: Seed 004's SLO classes vs a bulk writer, then a burst.
type sloClasses struct{}

func (sloClasses) Spec() Spec {
	return Spec{Name: "slo-classes", DefaultScale: 1,
		Title: "Seed 004's power/knowledge/task readers vs a bulk writer: agent off vs the slo-classes policy, then a burst"}
}

func (sloClasses) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runSLOClassesLab(wrap(r, o))
}
