package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// reservations: RAD reservations under network- and disk-bound loads (seed 003).
type reservations struct{}

func (reservations) Spec() Spec {
	return Spec{Name: "reservations", DefaultScale: 0.5,
		Title: "RAD reservation (rate + period) under a network-bound and a disk-bound load, agent off vs policy reservations; network vs disk saturation indicators (seed 003)"}
}

func (reservations) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runReservations(wrap(r, o))
}
