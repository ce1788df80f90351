package experiments

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/sample"
)

// threshold: auto's run in summary.json, from the status samples: the
// threshold chosen at the end, when it was first learned, the range and
// changes, what the last estimate saw, and the reader's p95 from the
// learning on against the choice (the ticks before it left out).
func TestAutoThresholdRun(t *testing.T) {
	learning := &agent.AutoThresholdStatus{State: "learning"}
	learned := &agent.AutoThresholdStatus{State: "learned", PeakMBs: 30.123, WaitAtPeakMs: 14.456, FloorMs: 6.451}
	ds := &delaySamples{auto: []autoSample{
		{1, 15, learning}, {1.5, 15, learning}, {2, 16.2, learned}, {2.5, 14.5, learned}, {3, 14.5, learned},
	}}
	var ticks []lab.Tick
	for i := 1; i <= 40; i++ {
		w := 10.0 // 10 ms from 2 s on
		if i <= 20 {
			w = 40 // before the learning: not counted
		}
		ticks = append(ticks, lab.Tick{T: float64(i) / 10, Dev: map[string]sample.Interval{"b2": {Reads: 3, ReadWaitMs: w}}})
	}
	p := &lab.Phase{Name: "threshold-auto", From: 500 * time.Millisecond, To: 4 * time.Second}
	got := ds.autoThreshold(&lab.PhaseResult{Phase: p, Ticks: ticks}, p)
	if got.State != "learned" || got.ChosenMs != 14.5 || got.StartMs != 15 || got.LearnedAtS != 2 || got.MinMs != 14.5 || got.MaxMs != 16.2 ||
		got.Changes != 2 || got.PeakMBs != 30.12 || got.WaitAtPeakMs != 14.46 || got.FloorMs != 6.45 {
		t.Errorf("got %+v", got)
	}
	if got.ReaderP95SinceLearnedMs != 10 || got.P95XChosen != 0.69 {
		t.Errorf("reader p95 since learned %v (%v ×), want 10 ms (0.69 ×)", got.ReaderP95SinceLearnedMs, got.P95XChosen)
	}
	// No status with threshold_auto: learning at the config's start.
	if got := (&delaySamples{}).autoThreshold(&lab.PhaseResult{Phase: p, Ticks: ticks}, p); got.State != "learning" || got.ChosenMs != 15 {
		t.Errorf("no samples: %+v", got)
	}
}

// --threshold-auto is refused, before the lab is touched, by an
// experiment whose agent it would not reach.
func TestThresholdAutoRefused(t *testing.T) {
	for _, name := range []string{"interference", "cluster-autonomic", "bridge-autonomic"} {
		_, err := RunExperiment(context.Background(), name, Options{ThresholdAuto: true, RunOptions: lab.RunOptions{Results: t.TempDir()}})
		if err == nil || !strings.Contains(err.Error(), name+" takes no --threshold-auto (these do: autonomic, mixed, pid, read-backup)") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
