package experiments

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// autonomicFixture loads testdata/autonomic-run's three phases.
func autonomicFixture(t *testing.T) []*lab.PhaseResult {
	t.Helper()
	dir := gunzipFixture(t, "testdata/autonomic-run")
	phases := phasesBetween(5*time.Second, 21*time.Second, "baseline", "threshold-10ms", "threshold-20ms")
	rs, err := lab.LoadTrace(filepath.Join(dir, "trace.csv"), phases)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// The fixture is a real autonomic run at scale 0.25 in this lab (its
// baseline and two regulated phases, first three load steps); the expected
// figures come from testdata/autonomic-run/expected.py, standard-library
// Python over the same file.
func TestFirstSecondFromRecordedRun(t *testing.T) {
	rs := autonomicFixture(t)
	want := map[string]report.Onset{
		"baseline":       {WorstMeanMs: 47.18, MedianMeanMs: 45.74, PeakMs: 69, Steps: 3},
		"threshold-10ms": {WorstMeanMs: 14.97, MedianMeanMs: 12.75, PeakMs: 73, Steps: 3},
		"threshold-20ms": {WorstMeanMs: 26.32, MedianMeanMs: 25.25, PeakMs: 81, Steps: 3},
	}
	for _, res := range rs {
		got := report.FirstSecond(res.Ticks, "b2", lab.Hosts[1:], []float64{5, 12.5, 20}, 6.25, nil)
		if got != want[res.Phase.Name] {
			t.Errorf("%s: onset %+v, want %+v", res.Phase.Name, got, want[res.Phase.Name])
		}
	}
}

// The onset detector, fed the recorded run's writer traffic tick by tick
// (the agent feeds it per-consumer TCP bytes; diskstats' write bytes per
// initiator LUN are the same load one hop later), fires once per load
// step, on the first tick in which the writers wrote, and nowhere else:
// not in the lead, not while the load runs under a changing throttle, not
// in the pauses.
func TestOnsetDetectorOnRecordedRun(t *testing.T) {
	rs := autonomicFixture(t)
	// First ticks with writes, read off the trace (expected.py prints
	// them with the onsets).
	want := map[string][]float64{
		"baseline":       {5.411, 12.911, 20.411},
		"threshold-10ms": {5.403, 12.903, 20.403},
		"threshold-20ms": {5.402, 12.902, 20.402},
	}
	for _, res := range rs {
		d := control.NewOnsetDetector(control.DefaultOnsetConfig(1e6))
		var got []float64
		for _, tk := range res.Ticks {
			var w float64
			var n int
			for _, h := range lab.Hosts[1:] {
				if iv, ok := tk.Dev[h]; ok {
					w += iv.WriteBps
					if iv.WriteBps >= 1e6 {
						n++
					}
				}
			}
			if d.Update(w, n) {
				got = append(got, tk.T)
			}
		}
		if !slices.Equal(got, want[res.Phase.Name]) {
			t.Errorf("%s: fired at %v, want %v", res.Phase.Name, got, want[res.Phase.Name])
		}
	}
}
