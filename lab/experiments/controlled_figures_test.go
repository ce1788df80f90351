package experiments

import (
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// TestControlledRunProbesAtStalls: a run's loss_probes_at_stalls is the
// target's side of loss_probes_at_stalls_by_side — the same figure, not
// a second count that could drift from it — and each side counts only
// its own namespaces' probes; a phase whose stalls were not watched has
// neither.
func TestControlledRunProbesAtStalls(t *testing.T) {
	series := func(probes ...uint64) []lab.TCPSample {
		var out []lab.TCPSample
		for i, p := range probes {
			out = append(out, lab.TCPSample{T: time.Duration(16+i) * time.Second, C: lab.TCPCounters{LossProbes: p}})
		}
		return out
	}
	stall := lab.Stall{T: 18500 * time.Millisecond, CPU: 0, Late: 30 * time.Millisecond}
	res := &lab.PhaseResult{
		Phase: &lab.Phase{Name: "threshold-15ms", From: 16 * time.Second, To: 20 * time.Second},
		TCPSeries: map[string][]lab.TCPSample{
			"bm": series(0, 1, 3, 3), // 2 probes in (17, 18] s, 1 in (16, 17]
			"b2": series(0, 0, 0, 0),
			"b3": series(0, 0, 4, 4), // 4 in (17, 18] s
			"b4": series(0, 0, 0, 1), // 1 in (18, 19] s: the stall's second
		},
		Stalls: []lab.Stall{stall},
		Host:   report.HostCPU{Stalls: &report.HostStalls{Over8ms: 1, MaxMs: 30}},
	}
	run := controlledRun(res, 15*time.Millisecond, nil, 0, false, nil)
	by := run.LossProbesAtStallsBySide
	if by == nil || by.Target == nil || by.Writers == nil || by.Reader == nil {
		t.Fatalf("by side: got %+v, want every side", by)
	}
	if run.LossProbesAtStalls != by.Target {
		t.Errorf("loss_probes_at_stalls %p is not the by-side target %p", run.LossProbesAtStalls, by.Target)
	}
	for _, c := range []struct {
		side      string
		got, want report.ProbesAtStalls
	}{
		// The stall at 18.5 s (30 ms) reaches back into (17, 18] by the
		// slack only if it began within it; it did not, so the target's
		// and b3's probes before it are not at a stall.
		{"target", *by.Target, report.ProbesAtStalls{At: 0, Of: 3}},
		{"writers", *by.Writers, report.ProbesAtStalls{At: 1, Of: 5}},
		{"reader", *by.Reader, report.ProbesAtStalls{At: 0, Of: 0}},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.side, c.got, c.want)
		}
	}
	// The same series carry no retransmission: every side is matched,
	// none has one.
	if r := run.RetransAtStallsBySide; r == nil || r.Target == nil || *r.Target != (report.ProbesAtStalls{}) || r.Writers == nil || *r.Writers != (report.ProbesAtStalls{}) {
		t.Errorf("retransmissions at stalls: got %+v, want every side at 0 of 0", r)
	}
	res.Host.Stalls = nil
	if run := controlledRun(res, 15*time.Millisecond, nil, 0, false, nil); run.LossProbesAtStalls != nil || run.LossProbesAtStallsBySide != nil || run.RetransAtStallsBySide != nil {
		t.Errorf("unwatched phase: got %+v, %+v and %+v, want none", run.LossProbesAtStalls, run.LossProbesAtStallsBySide, run.RetransAtStallsBySide)
	}
}
