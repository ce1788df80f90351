package report

import (
	"math"
	"testing"

	"github.com/sanqos/sanqos/sample"
)

func TestFirstSecond(t *testing.T) {
	// tk builds a 100 ms tick ending at s with the reader's reads and
	// wait and the writer's write count.
	tk := func(s float64, reads uint64, wait float64, writes uint64) Tick {
		if reads == 0 {
			wait = math.NaN()
		}
		return Tick{T: s, Dev: map[string]sample.Interval{"r": {Reads: reads, ReadWaitMs: wait}, "w": {Writes: writes, Seconds: 0.1}}}
	}
	for _, tc := range []struct {
		name  string
		ticks []Tick
		steps []float64
		want  Onset
	}{
		{"no writes, nothing measured", []Tick{tk(0.1, 3, 5, 0), tk(0.2, 3, 5, 0)}, []float64{0}, Onset{}},
		{"onset is the first writing interval, not the plan",
			[]Tick{tk(0.1, 3, 5, 0), tk(0.2, 3, 5, 0), tk(0.3, 2, 40, 4), tk(0.4, 2, 20, 4), tk(1.3, 4, 10, 4), tk(1.4, 4, 99, 4)},
			// Reads completing in (0.2, 1.2]: 2×40 + 2×20 = 120 over 4.
			[]float64{0}, Onset{WorstMeanMs: 30, MedianMeanMs: 30, PeakMs: 40, Steps: 1}},
		{"worst and median over steps",
			[]Tick{tk(0.1, 1, 10, 1), tk(2.1, 1, 30, 1), tk(4.1, 1, 20, 1)},
			[]float64{0, 2, 4}, Onset{WorstMeanMs: 30, MedianMeanMs: 20, PeakMs: 30, Steps: 3}},
		{"intervals without reads are skipped, not zero",
			[]Tick{tk(0.1, 0, 0, 2), tk(0.2, 1, 12, 2)}, []float64{0}, Onset{WorstMeanMs: 12, MedianMeanMs: 12, PeakMs: 12, Steps: 1}},
	} {
		if got := FirstSecond(tc.ticks, "r", []string{"w"}, tc.steps, 1.5, nil); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// ReadsAsWrites counts every host's reads but the reader's as writes, in
// a copy, for ticks and for a struct embedding one.
func TestReadsAsWrites(t *testing.T) {
	type simTick struct {
		Tick
		Delay float64
	}
	ticks := []simTick{{Tick: Tick{T: 0.1, Dev: map[string]sample.Interval{"b2": {Reads: 3, Writes: 1}, "b3": {Reads: 4, Writes: 2}}}, Delay: 5}}
	got := ReadsAsWrites(ticks, "b2")
	if len(got) != 1 || got[0].T != 0.1 || got[0].Dev["b2"].Writes != 1 || got[0].Dev["b2"].Reads != 3 || got[0].Dev["b3"].Writes != 6 {
		t.Errorf("ReadsAsWrites %+v", got)
	}
	if ticks[0].Dev["b3"].Writes != 2 {
		t.Errorf("input changed: %+v", ticks)
	}
}

// The floor: before the controller acts a read waits the queue it finds;
// from then on only what was queued then, draining, and every read adds
// the reader's own wait with no interferer.
func TestFirstSecondFloor(t *testing.T) {
	b := Backlog{At: []float64{1.0, 1.02}, Until: []float64{1.05, 1.08}}
	for _, tc := range []struct{ t, want float64 }{{0.5, 0}, {1.0, 50}, {1.01, 40}, {1.02, 60}, {1.1, 0}} {
		if got := b.Ms(tc.t); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Ms(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
	iv := func(reads uint64, wait float64) sample.Interval {
		return sample.Interval{Reads: reads, ReadWaitMs: wait, Seconds: 0.1}
	}
	ticks := []Tick{
		{T: 0.1, Dev: map[string]sample.Interval{"r": iv(3, 5)}},
		{T: 0.2, Dev: map[string]sample.Interval{"r": iv(3, 5)}},
		{T: 1.1, Dev: map[string]sample.Interval{"r": iv(2, 30), "w": {Writes: 5, Seconds: 0.1}}},
		{T: 1.2, Dev: map[string]sample.Interval{"r": iv(2, 10), "w": {Writes: 5, Seconds: 0.1}}},
	}
	q := &OnsetQueue{Queue: b}
	q.Note(1.02, 55)
	q.Note(1.02, 55) // the same surge in the next status: once
	// (20 ms × 40 ms mean + 60 ms × 30 ms mean) / 1 s + 5 ms = 7.6 ms.
	want := Onset{WorstMeanMs: 20, MedianMeanMs: 20, PeakMs: 30, Steps: 1, FloorMs: 7.6, MaxFloorMs: 7.6, OverFloor: 2.63,
		BacklogMs: 60, BacklogEstMs: 55, ActedAfterMs: 20, FloorSteps: 1}
	if got := FirstSecond(ticks, "r", []string{"w"}, []float64{0.5}, 5, q); got != want {
		t.Errorf("FirstSecond %+v\nwant %+v", got, want)
	}
	// No action in the step's on-period: no floor.
	want = Onset{WorstMeanMs: 20, MedianMeanMs: 20, PeakMs: 30, Steps: 1}
	if got := FirstSecond(ticks, "r", []string{"w"}, []float64{0.5}, 5, &OnsetQueue{Queue: b}); got != want {
		t.Errorf("without an action: %+v", got)
	}
}
