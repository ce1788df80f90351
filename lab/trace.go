package lab

import "github.com/sanqos/sanqos/report"

// LoadTrace reads a run's trace.csv back into phase results, matching rows
// to phases by name, so summaries and plots can be recomputed from any
// recorded run (TCP counters are not in the trace and stay zero).
func LoadTrace(path string, phases []*Phase) ([]*PhaseResult, error) {
	byName := map[string]*Phase{}
	for _, p := range phases {
		byName[p.Name] = p
	}
	runs, err := report.ReadTrace(path, func(phase string, _ int) bool { return byName[phase] != nil })
	if err != nil {
		return nil, err
	}
	out := make([]*PhaseResult, 0, len(runs))
	for _, run := range runs {
		out = append(out, &PhaseResult{Phase: byName[run.Phase], Repeat: run.Repeat, Ticks: run.Ticks})
	}
	return out, nil
}
