// Package control turns a resource's filtered saturation indicator (e.g. the
// EWMA of its read wait time, in ms) into a throttle level: an integer number
// of delay steps applied to the resource's throttleable consumers.
//
// It is pure, clock-free arithmetic: one Update per sample interval, no I/O,
// no goroutines, no knowledge of devices, consumers or how a step is
// enforced (that is the agent's and package throttle's job). Controllers are
// not safe for concurrent use; the agent runs one per resource loop.
//
// The controller is PID, the thesis' modified single-sided PID (§4.4.2),
// behind the Controller interface.
//
// # Onset response
//
// A feedback controller on the smoothed read wait answers a surge of
// writers two or three samples late: a read must first queue behind the
// new writes and complete, then the EWMA must move. The writers' bytes,
// though, are in the very first sample. So, as blk-iolatency acts on a
// latency window instead of waiting for an average to drift, the agent
// runs an OnsetDetector on that leading signal and, when it fires, preloads
// the PID (Preload) with the output a Memory learnt held the threshold
// under the same load last time; a short hold keeps the release rule from
// undoing the preload before the surge reaches the wait, and then the
// ordinary law carries on from there, bumplessly. Nothing is guessed for a
// load never seen. onset.go has the whole argument.
//
// # Past the delay's ceiling: split range
//
// A controller's steps need not all be delays. The agent may give the PID
// more steps than max_delay holds and map the ones beyond it to a second
// actuator, write-rate caps on the heaviest writers (agent, lever.go): one
// output sequencing two levers, as a process plant sequences two valves.
// The hand-over is then the PID's own motion, not a rule of its own: while
// the wait stays above the threshold with the delay at its maximum the
// integral walks on into the cap range, and when it recovers it walks back
// through the caps (they loosen, then vanish) before the delay falls. The
// onset preload never lands in the cap range; only the PID walks there.
//
// Imports (sanqos): none.
package control

import (
	"math"
	"time"
)

// Controller decides the throttle step of one resource from its measured
// saturation indicator.
type Controller interface {
	// Update feeds one measurement (same unit as the threshold) and returns
	// the throttle step in [0, max]. A NaN or ±Inf measurement is ignored:
	// state is untouched and the previous step is returned, so a sampling
	// gap neither releases nor tightens the throttle.
	Update(measured float64) int
	// Output returns the current step without feeding a measurement.
	Output() int
	// Reset returns the controller to its initial, unthrottled state.
	Reset()
}

// DefaultStep is the delay one throttle step adds. The thesis found 0.5 ms a
// suitable granularity (Figs 5.5/5.6: rate falls near-linearly with delay).
const DefaultStep = 500 * time.Microsecond

// DefaultMaxSteps caps the throttle at 40 × 0.5 ms = 20 ms, the thesis'
// maximum, which stays an order of magnitude below Linux's TCP_RTO_MIN
// (200 ms) so a delayed ACK can never trigger a retransmission timeout.
const DefaultMaxSteps = 40

// Step converts a throttle step to the packet delay it stands for.
func Step(n int, step time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(n) * step
}

// ceilStep rounds a continuous controller output up to an integer step, as
// the thesis does ("rounded up to the next integer value"), clamped to
// [0, max]. The 1e-9 slack keeps float noise (2.0000000001) from costing a
// whole extra step.
func ceilStep(u float64, max int) int {
	switch {
	case !(u > 0):
		return 0
	case u >= float64(max):
		return max
	}
	return int(math.Ceil(u - 1e-9))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func clamp(x, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, x)) }
