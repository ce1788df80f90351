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
		if got := FirstSecond(tc.ticks, "r", []string{"w"}, tc.steps, 1.5); got != tc.want {
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
