package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// importantSets: Read-over-write vs important-sets (thesis 5.7).
type importantSets struct{}

func (importantSets) Spec() Spec {
	return Spec{Name: "important-sets", DefaultScale: 1,
		Title: "Thesis 5.7: the small reader named important, a large-block reader (not) and 8 writers: read-over-write vs important-sets"}
}

func (importantSets) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runImportantSets(wrap(r, o))
}
