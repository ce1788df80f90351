package experiments

import (
	"math"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
)

// netBoundTrace is the reserved writer's phase of a real net-bound run
// with the policy on (scale 0.25), and the window it is measured over.
func netBoundTrace(t *testing.T) (res *lab.PhaseResult, from, to time.Duration) {
	t.Helper()
	from, to = 2500*time.Millisecond, 14*time.Second
	ph := &lab.Phase{Name: "net-bound-reservations", From: from, To: to}
	rs, err := lab.LoadTrace("testdata/reservations-run/trace-b2.csv", []*lab.Phase{ph})
	if err != nil {
		t.Fatal(err)
	}
	return rs[0], from, to
}

// Periods met, from the reserved writer's trace of a real net-bound run
// with the policy on (scale 0.25: window 2.5–14 s, 1 s periods, 1 MB
// reserved). Expected figures from an independent computation over the
// same CSV (sum of write_mb_s × tick spacing per period, in Python).
func TestResvRunPeriodsFromRecordedTrace(t *testing.T) {
	res, from, to := netBoundTrace(t)
	run := resvRun(res, nil, "net-bound", "reservations", from, to)
	want := []float64{0.786, 0.981, 1.116, 1.059, 1.046, 1.101, 1.052, 1.116, 1.047, 0.983, 1.165}
	if run.Periods != len(want) || run.PeriodsMet != 8 || run.PctMet != 72.7 {
		t.Fatalf("periods %d met %d (%v %%), want %d, 8, 72.7 %%", run.Periods, run.PeriodsMet, run.PctMet, len(want))
	}
	for i, w := range want {
		if math.Abs(run.AttainedMB[i]-w) > 0.002 {
			t.Errorf("period %d: %v MB, want %v", i, run.AttainedMB[i], w)
		}
	}
}

// Periods follow the agent's boundaries, taken from a status sample: a
// period that began 0.7 s before a sample taken at 3.5 s into the phase
// means boundaries at 2.8 s + k s, the first one in the window at 2.8 s.
func TestResvRunAlignsToAgentPeriods(t *testing.T) {
	res, from, to := netBoundTrace(t)
	wall := time.Unix(1000, 0)
	var st agent.ResourceStatus
	st.Reservations = []agent.ReservationStatus{{PeriodStart: wall.Add(-700 * time.Millisecond)}}
	run := resvRun(res, []resvSample{{t: 3.5, wall: wall, st: st}}, "net-bound", "reservations", from, to)
	if !run.PeriodsAlignedToAgent || run.FirstPeriodS != 2.8 || run.Periods != 11 {
		t.Fatalf("aligned %v, first %v s, %d periods; want true, 2.8 s, 11", run.PeriodsAlignedToAgent, run.FirstPeriodS, run.Periods)
	}
}
