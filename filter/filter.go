// Package filter smooths the noisy per-interval saturation indicator
// (typically the read wait time from package sample) into the trend the
// controller acts on: an exponentially weighted moving average (the thesis'
// choice, §4.4.1).
//
// It is pure arithmetic on float64 samples: it does no I/O, keeps no clock
// (one Update is one sample interval, whatever the caller's interval is),
// and knows nothing of devices, resources or thresholds.
//
// Non-finite samples (NaN, ±Inf) are ignored: package
// sample reports NaN for "no request completed in this interval", and that
// must never read as "fast" (0) nor poison the state forever (NaN). A caller
// that wants the thesis' "drop the EWMA when there is no activity"
// behaviour (listing C.3) feeds an explicit 0 instead.
//
// Imports (sanqos): none.
package filter

import (
	"errors"
	"fmt"
	"math"
)

// EWMA is L(t) = α·l(t) + (1−α)·L(t−1). The first finite sample initialises
// L directly: starting from 0 would make the indicator climb from "healthy"
// for several intervals after start-up, hiding a resource that is already
// saturated.
type EWMA struct {
	alpha float64
	value float64
	ok    bool
}

var errAlpha = errors.New("filter: EWMA alpha must be in (0, 1]")

// NewEWMA returns an EWMA with smoothing factor alpha ∈ (0, 1]; the thesis
// used 0.25 at 100 ms for control and 0.15 for plots. alpha = 0 would never
// move off the first sample, so it is rejected.
func NewEWMA(alpha float64) (*EWMA, error) {
	if !(alpha > 0 && alpha <= 1) { // also rejects NaN
		return nil, fmt.Errorf("%w: got %v", errAlpha, alpha)
	}
	return &EWMA{alpha: alpha}, nil
}

// Alpha returns the smoothing factor.
func (e *EWMA) Alpha() float64 { return e.alpha }

// Update feeds one sample and returns the filtered value and whether it
// is defined yet (false until the first finite sample).
func (e *EWMA) Update(x float64) (float64, bool) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return e.value, e.ok
	}
	if !e.ok {
		e.value, e.ok = x, true
		return e.value, true
	}
	// Written as L + α(l − L) (as the thesis' listings do) rather than
	// αl + (1−α)L: one multiplication, and exactly l when α = 1.
	e.value += e.alpha * (x - e.value)
	return e.value, true
}

// Value returns the current filtered value without feeding a sample.
func (e *EWMA) Value() (float64, bool) { return e.value, e.ok }

// Reset forgets all samples.
func (e *EWMA) Reset() { e.value, e.ok = 0, false }
