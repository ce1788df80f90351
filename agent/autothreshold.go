package agent

import (
	"math"
	"slices"

	"github.com/sanqos/sanqos/internal/quantile"
)

// threshold: auto learns a resource's threshold from the samples the
// agent already takes: each tick, the resource's throughput (its devices'
// read and write bytes per second, from diskstats) and the read wait the
// threshold bounds (the indicator's raw wait). The rule is VMware SIOC's
// automatic threshold, the latency a datastore shows at 90 % of its peak
// throughput, on samples instead of SIOC's injected load:
//
//   - the peak is the 95th percentile of the throughput of the loaded
//     ticks (an interferer active, as the onset detector sees it) over
//     the last autoRing of them: the top, without single ticks' bursts
//     (random I/O's per-tick throughput scatters: the lab's mixed load
//     had its 99th percentile 27 % above its 95th);
//   - the wait at 90 % of it is the read wait of the loaded ticks that
//     moved at least 90 % of the peak, as the objective states waits:
//     their 95th percentile under objective p95, their median under
//     mean. An on/off load (a backup, a bulk copy) puts almost no tick
//     between the quiet floor and the peak, so a band around 90 % would
//     hold nothing; on the resource's curve every tick at or above 90 %
//     of the peak waits at least the wait at 90 %. A load step's first
//     ticks, whose waits are the highest, move less than 90 % of the
//     peak and are left out;
//   - never below autoFloorMin × the floor (the read wait with no
//     interferer, floorEstimate; the lowest it has been): a threshold within 1.1 × of it cannot
//     be met (status says UNREACHABLE there), and 1.15 is the upper end
//     of the margin Linux io.latency's documentation advises.
//
// The agent's own delays shape what it learns from. Where holding the
// threshold costs the interferers less than 10 % of the peak, the busy
// ticks are the held ones (the agent slowed someone in them) and their
// wait is the threshold held, less the ticks over it, which are mostly
// a load step's first and move less than 90 % of the peak: 10-20 %
// under it. That wait is the agent's doing, not the resource's: an
// estimate under the threshold from busy ticks mostly held keeps the
// threshold (the lab's backup, held at 15 ms at a cost under 5 %, was
// learned 12.2-13.6 ms and its reader held 1.14-1.31 × over the moving
// threshold). Where it costs more, the held ticks fall out of the busy
// set, the busy ticks are the less delayed ones, with higher waits, and
// the threshold rises until the resource moves 90 % of its peak again.
// It comes down when the resource moves its peak unslowed at a lower
// wait. The statistic follows the objective for the same reason: the
// median of ticks held at a p95 objective sits below the threshold, and
// each estimate would lower it again (lab read-backup, scale 0.25: 18.9
// → 10.5 ms in 25 s, never settled).
//
// Until it has seen autoMinLoaded loaded ticks, autoMinBusy of them near
// the peak, and the floor, the resource is held at the start: AutoStart
// (15 ms, the default threshold: every lab figure of the README was
// measured at it), raised to autoFloorMin × the floor where that is
// higher. Holding it from the first tick leaves no night unprotected
// while the agent learns.
const (
	autoRing       = 3000 // loaded ticks kept: 5 minutes of load at 100 ms
	autoMinLoaded  = 100  // loaded ticks before the first estimate (10 s)
	autoMinBusy    = 20   // of them at 90 % of the peak or more (2 s)
	autoEvery      = 50   // ticks between estimates (5 s)
	autoPeakQ      = 0.95
	autoBusyShare  = 0.9
	autoFloorMin   = 1.15
	autoHysteresis = 0.05 // a new estimate within 5 % over it keeps the threshold
	// autoDownHysteresis: within 10 % under it too: each estimate moves
	// the controller's setpoint, and one a tick's scatter lowers is
	// chased.
	autoDownHysteresis = 0.10
)

// autoSample is one loaded tick; held: the agent slowed some consumer
// of the resource in it.
type autoSample struct {
	bps, waitMs float64
	held        bool
}

// autoThreshold is one resource's learner. Not safe for concurrent use:
// its resource's pipeline owns it.
type autoThreshold struct {
	startMs float64
	waitQ   float64 // the busy ticks' wait quantile: 0.95 (p95) or 0.5 (mean)
	ring    []autoSample
	next, n int
	since   int
	learned bool
	thrMs   float64
	// floorMs is the lowest floor seen since it was known: the floor
	// estimate takes any tick the onset detector calls quiet, and an
	// interferer held at a large delay looks quiet to it (lab
	// read-backup at 0.25, delays at 50-90 ms: the floor rose from 6.7
	// to 15.2 ms and took the threshold up with it). The read wait with
	// no interferer does not rise under load; the bound never follows
	// the estimate up.
	floorMs float64
	// what the last estimate saw: the peak, the wait at 90 % of it, and
	// how many ticks it rested on
	peakBps, busyWaitMs float64
	busy                int
	scratch             []float64
}

// newAutoThreshold starts a learner at startMs; tail says the objective
// is p95.
func newAutoThreshold(startMs float64, tail bool) *autoThreshold {
	q := 0.5
	if tail {
		q = 0.95
	}
	return &autoThreshold{startMs: startMs, waitQ: q, thrMs: startMs, ring: make([]autoSample, autoRing)}
}

// observe takes one tick: the resource's throughput (bytes/s), the read
// wait (NaN: no read), whether an interferer was active, whether the
// agent slowed someone in it, and the floor (ok false: not known yet).
// It reports whether the threshold changed.
func (a *autoThreshold) observe(bps, waitMs float64, loaded, held bool, floorMs float64, floorOK bool) bool {
	if loaded && validWait(waitMs) && bps >= 0 && !math.IsInf(bps, 0) {
		a.ring[a.next] = autoSample{bps, waitMs, held}
		a.next = (a.next + 1) % len(a.ring)
		a.n = min(a.n+1, len(a.ring))
	}
	old := a.thrMs
	if floorOK && validWait(floorMs) && (a.floorMs == 0 || floorMs < a.floorMs) {
		a.floorMs = floorMs
	}
	if !a.learned && a.floorMs > 0 {
		a.settle(max(a.startMs, autoFloorMin*a.floorMs))
	}
	if a.since++; a.since >= autoEvery {
		a.since = 0
		a.estimate()
	}
	return a.thrMs != old
}

// estimate applies the rule to the ring, once there is enough of it.
func (a *autoThreshold) estimate() {
	if a.n < autoMinLoaded || a.floorMs == 0 {
		return
	}
	peak, w, busy, held := waitAtPeak(a.ring[:a.n], a.waitQ, &a.scratch)
	if busy < autoMinBusy {
		return
	}
	a.peakBps, a.busyWaitMs, a.busy = peak, w, busy
	t := max(w, autoFloorMin*a.floorMs)
	switch {
	case t < a.thrMs && 2*held > busy:
		t = a.thrMs // the agent's hold made that wait: the threshold stays
	case !a.learned:
		a.thrMs = 0 // the first estimate is taken whatever its distance
	}
	a.learned = true
	a.settle(t)
}

// waitAtPeak is the rule on loaded samples: the peak (the autoPeakQ
// quantile of their throughput), the q quantile of the waits of the
// samples at autoBusyShare of it or more, how many those are, and how
// many of them were held. scratch is reused.
func waitAtPeak(samples []autoSample, q float64, scratch *[]float64) (peakBps, waitMs float64, busy, held int) {
	if len(samples) == 0 {
		return 0, math.NaN(), 0, 0
	}
	b := (*scratch)[:0]
	for _, s := range samples {
		b = append(b, s.bps)
	}
	slices.Sort(b)
	peakBps = quantile.Of(b, autoPeakQ, quantile.NearestRank)
	b = b[:0]
	for _, s := range samples {
		if s.bps >= autoBusyShare*peakBps {
			b = append(b, s.waitMs)
			if s.held {
				held++
			}
		}
	}
	*scratch = b
	if len(b) == 0 {
		return peakBps, math.NaN(), 0, 0
	}
	slices.Sort(b)
	return peakBps, quantile.Of(b, q, quantile.Linear), len(b), held
}

// WaitAtPeak is threshold: auto's rule on a series of loaded samples
// (throughput in bytes/s, read wait in ms, one per interval, both
// valid), for sanqos doctor: the peak, the wait at 90 % of it (its q
// quantile: 0.95 for objective p95), and how many samples that wait
// rests on.
func WaitAtPeak(bps, waitMs []float64, q float64) (peakBps, atPeakMs float64, busy int) {
	s := make([]autoSample, 0, len(bps))
	for i := range min(len(bps), len(waitMs)) {
		s = append(s, autoSample{bps: bps[i], waitMs: waitMs[i]})
	}
	var scratch []float64
	peakBps, atPeakMs, busy, _ = waitAtPeak(s, q, &scratch)
	return peakBps, atPeakMs, busy
}

// AutoRule states threshold: auto's rule, for doctor's suggestion.
const AutoRule = "the read wait at 90 % of the peak throughput (the 95th percentile of the read wait of the intervals moving 90 % or more of the 95th percentile of the throughput; their median with objective mean), not under 1.15 × the floor"

// AutoFloorMin is how far above the floor threshold: auto's threshold
// stays at least.
const AutoFloorMin = autoFloorMin

// settle moves the threshold to t (rounded to 0.1 ms) unless t is within
// autoHysteresis over it or autoDownHysteresis under it: the estimate
// wanders with every tick the ring takes, and each change retargets the
// controller.
func (a *autoThreshold) settle(t float64) {
	if t > (1+autoHysteresis)*a.thrMs || t < (1-autoDownHysteresis)*a.thrMs {
		a.thrMs = math.Round(t*10) / 10
	}
}

// thresholdMs is the threshold in force.
func (a *autoThreshold) thresholdMs() float64 { return a.thrMs }

// AutoThresholdStatus is what threshold: auto has learned of a resource.
type AutoThresholdStatus struct {
	// State is "learning" (the threshold is the start) or "learned".
	State string `json:"state"`
	// PeakMBs is the peak throughput (MB/s, 95th percentile of the loaded
	// ticks), WaitAtPeakMs the read wait of the ticks at 90 % of it or
	// more (their p95, or median under objective mean), BusySamples how many ticks that is and LoadedSamples
	// how many loaded ticks it was drawn from (the last 5 minutes of
	// load at most). Zero until the first estimate.
	PeakMBs      float64 `json:"peak_mb_s"`
	WaitAtPeakMs float64 `json:"wait_at_90pct_peak_ms"`
	// FloorMs is the floor the threshold stays 1.15 × above: the lowest
	// the resource's floor estimate has been.
	FloorMs       float64 `json:"floor_ms"`
	BusySamples   int     `json:"busy_samples"`
	LoadedSamples int     `json:"loaded_samples"`
}

func (a *autoThreshold) status() *AutoThresholdStatus {
	st := &AutoThresholdStatus{State: "learning", PeakMBs: a.peakBps / 1e6, WaitAtPeakMs: a.busyWaitMs, FloorMs: a.floorMs, BusySamples: a.busy, LoadedSamples: a.n}
	if a.learned {
		st.State = "learned"
	}
	return st
}
