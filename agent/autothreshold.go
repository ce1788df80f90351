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
//   - the peak is the 99th percentile of the throughput of the loaded
//     ticks (an interferer active, as the onset detector sees it) over
//     the last autoRing of them: the top, without one tick's burst;
//   - the wait at 90 % of it is the median read wait of the loaded ticks
//     that moved at least 90 % of the peak. An on/off load (a backup, a
//     bulk copy) puts almost no tick between the quiet floor and the
//     peak, so a band around 90 % would hold nothing; on the resource's
//     curve every tick at or above 90 % of the peak waits at least the
//     wait at 90 %, so their median is that wait, from above;
//   - never below autoFloorMin × the floor (the read wait with no
//     interferer, floorEstimate): a threshold within 1.1 × of it cannot
//     be met (status says UNREACHABLE there), and 1.15 is the upper end
//     of the margin Linux io.latency's documentation advises.
//
// The agent's own delays shape what it learns from: once it holds the
// read wait at a threshold and the interferers still move 90 % of the
// peak, the median falls below it and the next estimate lowers it, until
// the delays cost more than 10 % of the peak (those ticks leave the busy
// set) or the floor's bound stops it. That is SIOC's aim, the lowest
// latency that still gives 90 % of the throughput, searched by the
// controller instead of an injector.
//
// Until it has seen autoMinLoaded loaded ticks, autoMinBusy of them near
// the peak, and the floor, the resource is held at the start: AutoStart
// (15 ms, the default threshold), raised to autoStartFloor × the floor
// where that is higher. Holding it from the first tick leaves no night
// unprotected while the agent learns; 15 ms is the threshold every lab
// figure of the README was measured at.
const (
	autoRing       = 3000 // loaded ticks kept: 5 minutes of load at 100 ms
	autoMinLoaded  = 100  // loaded ticks before the first estimate (10 s)
	autoMinBusy    = 20   // of them at 90 % of the peak or more (2 s)
	autoEvery      = 50   // ticks between estimates (5 s)
	autoPeakQ      = 0.95
	autoBusyShare  = 0.9
	autoFloorMin   = 1.15
	autoStartFloor = 1.5
	autoHysteresis = 0.05 // a new estimate within 5 % keeps the threshold
)

// autoSample is one loaded tick.
type autoSample struct{ bps, waitMs float64 }

// autoThreshold is one resource's learner. Not safe for concurrent use:
// its resource's pipeline owns it.
type autoThreshold struct {
	startMs float64
	ring    []autoSample
	next, n int
	since   int
	learned bool
	thrMs   float64
	// what the last estimate saw: the peak, the wait at 90 % of it, and
	// how many ticks it rested on
	peakBps, busyWaitMs float64
	busy                int
	scratch             []float64
}

func newAutoThreshold(startMs float64) *autoThreshold {
	return &autoThreshold{startMs: startMs, thrMs: startMs, ring: make([]autoSample, autoRing)}
}

// observe takes one tick: the resource's throughput (bytes/s), the read
// wait (NaN: no read), whether an interferer was active, and the floor
// (ok false: not known yet). It reports whether the threshold changed.
func (a *autoThreshold) observe(bps, waitMs float64, loaded bool, floorMs float64, floorOK bool) bool {
	if loaded && validWait(waitMs) && bps >= 0 && !math.IsInf(bps, 0) {
		a.ring[a.next] = autoSample{bps, waitMs}
		a.next = (a.next + 1) % len(a.ring)
		a.n = min(a.n+1, len(a.ring))
	}
	old := a.thrMs
	if !a.learned && floorOK {
		a.settle(max(a.startMs, autoStartFloor*floorMs))
	}
	if a.since++; a.since >= autoEvery {
		a.since = 0
		a.estimate(floorMs, floorOK)
	}
	return a.thrMs != old
}

// estimate applies the rule to the ring, once there is enough of it.
func (a *autoThreshold) estimate(floorMs float64, floorOK bool) {
	if a.n < autoMinLoaded || !floorOK {
		return
	}
	a.scratch = a.scratch[:0]
	for _, s := range a.ring[:a.n] {
		a.scratch = append(a.scratch, s.bps)
	}
	slices.Sort(a.scratch)
	peak := quantile.Of(a.scratch, autoPeakQ, quantile.NearestRank)
	a.scratch = a.scratch[:0]
	for _, s := range a.ring[:a.n] {
		if s.bps >= autoBusyShare*peak {
			a.scratch = append(a.scratch, s.waitMs)
		}
	}
	if len(a.scratch) < autoMinBusy {
		return
	}
	slices.Sort(a.scratch)
	w := quantile.Of(a.scratch, 0.5, quantile.Linear)
	a.peakBps, a.busyWaitMs, a.busy = peak, w, len(a.scratch)
	if !a.learned {
		a.learned, a.thrMs = true, 0 // the first estimate is taken whatever its distance
	}
	a.settle(max(w, autoFloorMin*floorMs))
}

// settle moves the threshold to t (rounded to 0.1 ms) unless t is within
// autoHysteresis of it: the estimate wanders with every tick the ring
// takes, and each change retargets the controller.
func (a *autoThreshold) settle(t float64) {
	if math.Abs(t-a.thrMs) > autoHysteresis*a.thrMs {
		a.thrMs = math.Round(t*10) / 10
	}
}

// thresholdMs is the threshold in force.
func (a *autoThreshold) thresholdMs() float64 { return a.thrMs }

// AutoThresholdStatus is what threshold: auto has learned of a resource.
type AutoThresholdStatus struct {
	// State is "learning" (the threshold is the start) or "learned".
	State string `json:"state"`
	// PeakMBs is the peak throughput (MB/s, 99th percentile of the loaded
	// ticks), WaitAtPeakMs the median read wait of the ticks at 90 % of
	// it or more, BusySamples how many ticks that is and LoadedSamples
	// how many loaded ticks it was drawn from (the last 5 minutes of
	// load at most). Zero until the first estimate.
	PeakMBs       float64 `json:"peak_mb_s"`
	WaitAtPeakMs  float64 `json:"wait_at_90pct_peak_ms"`
	BusySamples   int     `json:"busy_samples"`
	LoadedSamples int     `json:"loaded_samples"`
}

func (a *autoThreshold) status() *AutoThresholdStatus {
	st := &AutoThresholdStatus{State: "learning", PeakMBs: a.peakBps / 1e6, WaitAtPeakMs: a.busyWaitMs, BusySamples: a.busy, LoadedSamples: a.n}
	if a.learned {
		st.State = "learned"
	}
	return st
}
