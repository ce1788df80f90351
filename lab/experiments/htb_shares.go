package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// htbShares: Per-consumer HTB rate caps changed at run time (seed 001).
type htbShares struct{}

func (htbShares) Spec() Spec {
	return Spec{Name: "htb-shares", DefaultScale: 1,
		Title: "Per-consumer HTB rate caps on sequential readers, changed at run time: cap error and the longest stall at a change (seed 001)"}
}

func (htbShares) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runHTBShares(wrap(r, o))
}
