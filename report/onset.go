package report

import (
	"math"

	"github.com/sanqos/sanqos/sample"
)

// Onset is how the reader fared in the first second after each load step:
// what a user notices when twelve writers start at once, before any
// controller has had a sample to act on.
type Onset struct {
	// WorstMeanMs is, over the steps, the worst read-weighted mean wait of
	// the reads that completed in the first second after the writers'
	// first write (the second's r_await): the criterion's measure.
	WorstMeanMs float64 `json:"worst_mean_ms"`
	// MedianMeanMs is the median of the same per-step means.
	MedianMeanMs float64 `json:"median_mean_ms"`
	// PeakMs is the largest single 100 ms interval's wait in those
	// seconds: the read that queued behind the writers' first commands,
	// which were on the wire before the step could be seen.
	PeakMs float64 `json:"peak_ms"`
	// Steps is how many steps had writes and reads to measure.
	Steps int `json:"steps"`
}

// OnsetWindow is the span after the writers' first write that Onset
// measures.
const OnsetWindow = 1.0 // seconds

// ReadsAsWrites is ticks with every host's reads but reader's counted as
// writes, for FirstSecond over interferers that read: it dates a load
// step by the first interval in which an interferer wrote, and a backup
// never writes. reader's intervals, and the writers' figures, are as
// they were; ticks are left unchanged.
func ReadsAsWrites[T Ticker](ticks []T, reader string) []Tick {
	out := make([]Tick, len(ticks))
	for i, t := range ticks {
		t := t.tick()
		out[i] = Tick{T: t.T, Dev: make(map[string]sample.Interval, len(t.Dev))}
		for h, iv := range t.Dev {
			if h != reader {
				iv.Writes += iv.Reads
			}
			out[i].Dev[h] = iv
		}
	}
	return out
}

// FirstSecond measures Onset over the ticks of a phase: steps are the
// planned on-times of the writers (seconds from the phase start), each on
// for onS seconds. A step's onset is the start of the first interval in
// which any writer host wrote (fio needs a few hundred ms to log in and
// start, so the plan's time is not when the load arrives).
func FirstSecond[T Ticker](ticks []T, reader string, writers []string, steps []float64, onS float64) Onset {
	var means []float64
	o := Onset{}
	for _, s := range steps {
		start := math.NaN()
		prevT := 0.0
		for _, tk := range ticks {
			t := tk.tick()
			if t.T > s && t.T <= s+onS && hostSum(t, writers, func(iv sample.Interval) float64 { return float64(iv.Writes) }) > 0 {
				// The interval's own length where it is known: a gap in the
				// trace must not stretch the window back.
				start = prevT
				for _, h := range writers {
					if iv, ok := t.Dev[h]; ok && iv.Seconds > 0 {
						start = math.Max(start, t.T-iv.Seconds)
					}
				}
				break
			}
			prevT = t.T
		}
		if math.IsNaN(start) {
			continue
		}
		var sum, n float64
		for _, tk := range ticks {
			t := tk.tick()
			if t.T <= start || t.T > start+OnsetWindow+1e-9 {
				continue
			}
			iv, ok := t.Dev[reader]
			if !ok || iv.Reads == 0 || math.IsNaN(iv.ReadWaitMs) {
				continue
			}
			sum += iv.ReadWaitMs * float64(iv.Reads)
			n += float64(iv.Reads)
			o.PeakMs = math.Max(o.PeakMs, iv.ReadWaitMs)
		}
		if n > 0 {
			means = append(means, sum/n)
		}
	}
	o.Steps = len(means)
	if len(means) == 0 {
		return o
	}
	d := Describe(means)
	o.WorstMeanMs, o.MedianMeanMs = Round(d.Max, 2), Round(d.P50, 2)
	o.PeakMs = Round(o.PeakMs, 2)
	return o
}
