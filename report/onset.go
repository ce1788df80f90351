package report

import (
	"math"
	"sort"

	"github.com/sanqos/sanqos/sample"
)

// Onset is how the reader fared in the first second after each load step:
// what a user notices when twelve writers start at once, before any
// controller has had a sample to act on; and, where the resource's queue
// was recorded, how far that was from what any controller could do.
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
	// FloorMs is the worst step's floor (OnsetQueue.floor): the first
	// second's mean wait had the controller, when it first acted, stopped
	// every later request, so that only the I/O already queued at the
	// resource then, and the reader's own service, were left. No
	// controller that acts then can do better. 0: no queue recorded.
	FloorMs float64 `json:"floor_ms,omitempty"`
	// MaxFloorMs is the highest floor of any step, and OverFloor the
	// highest ratio of a step's mean to its own floor: 1.1 says every
	// step's first second came within 10 % of what its queue allowed.
	MaxFloorMs float64 `json:"max_floor_ms,omitempty"`
	OverFloor  float64 `json:"worst_over_floor,omitempty"`
	// BacklogMs is the largest queue (ms of work, the wait of a read
	// arriving then) the resource held when the controller first acted
	// at a step, and ActedAfterMs the median time from a step's first
	// write interval's start to that action (negative: it acted on the
	// wire's bytes before the disk's first write completed).
	BacklogMs float64 `json:"backlog_at_action_ms,omitempty"`
	// BacklogEstMs is the same as the agent estimated it from the
	// resource's requests in flight (diskstats) and its completion rate
	// (agent.OnsetStatus): what an operator's status shows on a real
	// disk, beside the model's truth.
	BacklogEstMs float64 `json:"backlog_est_ms,omitempty"`
	ActedAfterMs float64 `json:"acted_after_ms,omitempty"`
	// FloorSteps is how many steps had a floor: those with a first
	// action of the controller in their on-period.
	FloorSteps int `json:"floor_steps,omitempty"`
}

// OnsetWindow is the span after the writers' first write that Onset
// measures.
const OnsetWindow = 1.0 // seconds

// Backlog is a modelled resource's FIFO queue over a phase: at At[i]
// (seconds after the phase started, ascending) a request arrived, after
// which the server was busy until Until[i]. Between arrivals the queue
// drains at the server's speed, so the wait of a read arriving at t is
// its own service time after Ms(t).
type Backlog struct{ At, Until []float64 }

// Ms is the work queued at t (ms): what a request arriving then waits
// before its own service.
func (b Backlog) Ms(t float64) float64 {
	k := sort.SearchFloat64s(b.At, t+1e-12) - 1 // last arrival at or before t
	if k < 0 {
		return 0
	}
	return 1e3 * math.Max(0, b.Until[k]-t)
}

// OnsetQueue is what the floor needs besides the trace: the resource's
// queue and the times (s after the phase start, ascending) at which the
// controller first acted on each surge (the agent's LastOnset.ActedAt).
type OnsetQueue struct {
	Queue Backlog
	Acted []float64
	// EstMs are the agent's estimates of the queue at each action
	// (BacklogEstMs; nil: none).
	EstMs []float64
}

// Note records a first action at (s after the phase start) with the
// agent's estimate of the queue then, unless it has it already (a
// status carries the latest surge until the next).
func (q *OnsetQueue) Note(at, estMs float64) {
	if n := len(q.Acted); n > 0 && q.Acted[n-1] >= at {
		return
	}
	q.Acted, q.EstMs = append(q.Acted, at), append(q.EstMs, estMs)
}

// floor is one step's floor over [start, start+OnsetWindow]: before the
// controller acts at ta a read waits the queue it found (it could not
// have been touched), from ta on only the queue left at ta, draining at
// the server's speed; each read then adds ownMs, its own service (the
// reader's median wait with no interferer). Reads are taken as evenly
// spread in time (the reader is rate-paced), so the mean is the time
// average, integrated at 1 ms.
func (q *OnsetQueue) floor(start, ta, ownMs float64) float64 {
	at := q.Queue.Ms(ta)
	var sum float64
	const dt = 1e-3
	n := int(math.Round(OnsetWindow / dt))
	for i := range n {
		t := start + (float64(i)+0.5)*dt
		if t < ta {
			sum += q.Queue.Ms(t)
		} else {
			sum += math.Max(0, at-1e3*(t-ta))
		}
	}
	return sum/float64(n) + ownMs
}

// acted is the controller's first action in (from, to], NaN if none,
// and the agent's estimate of the queue then (NaN: none).
func (q *OnsetQueue) acted(from, to float64) (float64, float64) {
	for i, a := range q.Acted {
		if a > from && a <= to {
			if i < len(q.EstMs) {
				return a, q.EstMs[i]
			}
			return a, math.NaN()
		}
	}
	return math.NaN(), math.NaN()
}

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
// start, so the plan's time is not when the load arrives). With q (nil:
// no queue recorded) each step also gets its floor, from the first
// action of the controller after the step's planned time.
func FirstSecond[T Ticker](ticks []T, reader string, writers []string, steps []float64, onS float64, q *OnsetQueue) Onset {
	var means, acted []float64
	o, worst := Onset{}, math.Inf(-1)
	ownMs := quietWait(ticks, reader, steps)
	for _, s := range steps {
		start := stepStart(ticks, writers, s, onS)
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
		if n == 0 {
			continue
		}
		mean := sum / n
		means = append(means, mean)
		f := math.NaN()
		if q != nil {
			if ta, est := q.acted(s, s+onS); !math.IsNaN(ta) {
				f = q.floor(start, ta, ownMs)
				o.BacklogMs = math.Max(o.BacklogMs, q.Queue.Ms(ta))
				if !math.IsNaN(est) {
					o.BacklogEstMs = math.Max(o.BacklogEstMs, est)
				}
				acted = append(acted, 1e3*(ta-start))
			}
		}
		if mean > worst {
			worst, o.FloorMs = mean, 0 // the worst step's floor, if it has one
			if !math.IsNaN(f) {
				o.FloorMs = f
			}
		}
		if math.IsNaN(f) {
			continue
		}
		o.FloorSteps++
		o.MaxFloorMs = math.Max(o.MaxFloorMs, f)
		o.OverFloor = math.Max(o.OverFloor, mean/f)
	}
	o.Steps = len(means)
	if len(means) == 0 {
		return o
	}
	d := Describe(means)
	o.WorstMeanMs, o.MedianMeanMs = Round(d.Max, 2), Round(d.P50, 2)
	o.PeakMs = Round(o.PeakMs, 2)
	o.FloorMs, o.MaxFloorMs, o.OverFloor = Round(o.FloorMs, 2), Round(o.MaxFloorMs, 2), Round(o.OverFloor, 2)
	o.BacklogMs, o.BacklogEstMs = Round(o.BacklogMs, 2), Round(o.BacklogEstMs, 2)
	if len(acted) > 0 {
		o.ActedAfterMs = Round(Describe(acted).P50, 1)
	}
	return o
}

// stepStart is the start of the first interval in (s, s+onS] in which a
// writer host wrote: the interval's own length where it is known (a gap
// in the trace must not stretch the window back), else the tick before.
// NaN: none wrote.
func stepStart[T Ticker](ticks []T, writers []string, s, onS float64) float64 {
	prevT := 0.0
	for _, tk := range ticks {
		t := tk.tick()
		if t.T > s && t.T <= s+onS && hostSum(t, writers, func(iv sample.Interval) float64 { return float64(iv.Writes) }) > 0 {
			start := prevT
			for _, h := range writers {
				if iv, ok := t.Dev[h]; ok && iv.Seconds > 0 {
					start = math.Max(start, t.T-iv.Seconds)
				}
			}
			return start
		}
		prevT = t.T
	}
	return math.NaN()
}

// quietWait is the reader's median wait over the intervals before the
// first step (its own service with no interferer), 0 if none.
func quietWait[T Ticker](ticks []T, reader string, steps []float64) float64 {
	if len(steps) == 0 {
		return 0
	}
	var w []float64
	for _, tk := range ticks {
		t := tk.tick()
		if iv, ok := t.Dev[reader]; ok && t.T <= steps[0] && iv.Reads > 0 {
			w = append(w, iv.ReadWaitMs)
		}
	}
	return Describe(w).P50
}
