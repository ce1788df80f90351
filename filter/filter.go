// Package filter smooths the noisy per-interval saturation indicator
// (typically the read wait time from package sample) into the trend the
// controller acts on: an exponentially weighted moving average (the thesis'
// choice, §4.4.1) and a moving median (the alternative it compared).
//
// It is pure arithmetic on float64 samples: it does no I/O, keeps no clock
// (one Update is one sample interval, whatever the caller's interval is),
// and knows nothing of devices, resources or thresholds.
//
// Non-finite samples (NaN, ±Inf) are ignored by every filter here: package
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
	"slices"
)

// Filter is a stateful smoother fed one sample per interval.
type Filter interface {
	// Update feeds one sample and returns the filtered value and whether
	// it is defined yet (false until the first finite sample).
	Update(x float64) (float64, bool)
	// Value returns the current filtered value without feeding a sample.
	Value() (float64, bool)
	// Reset forgets all samples.
	Reset()
}

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

// AlphaFor returns the α that gives an EWMA updated every interval the
// time constant tau (α = 1 − e^(−interval/tau)), so the smoothing stays the
// same when the sample interval changes. Both arguments share one unit.
func AlphaFor(interval, tau float64) float64 {
	if !(interval > 0) || !(tau > 0) {
		return 1
	}
	return -math.Expm1(-interval / tau)
}

// Alpha returns the smoothing factor.
func (e *EWMA) Alpha() float64 { return e.alpha }

// Update implements Filter.
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

// Value implements Filter.
func (e *EWMA) Value() (float64, bool) { return e.value, e.ok }

// Reset implements Filter.
func (e *EWMA) Reset() { e.value, e.ok = 0, false }

// MovingMedian is the median of the last n finite samples (fewer until n
// have arrived). With an even count it is the mean of the two middle
// values. The thesis found n = 6 the best visual fit at 100 ms.
type MovingMedian struct {
	ring    []float64
	next    int
	count   int
	scratch []float64
}

// NewMovingMedian returns a moving median over a window of n ≥ 1 samples.
func NewMovingMedian(n int) (*MovingMedian, error) {
	if n < 1 {
		return nil, fmt.Errorf("filter: moving median window must be ≥ 1, got %d", n)
	}
	return &MovingMedian{ring: make([]float64, n), scratch: make([]float64, 0, n)}, nil
}

// Window returns n.
func (m *MovingMedian) Window() int { return len(m.ring) }

// Len returns how many samples the median currently covers (≤ n).
func (m *MovingMedian) Len() int { return m.count }

// Update implements Filter.
func (m *MovingMedian) Update(x float64) (float64, bool) {
	if !math.IsNaN(x) && !math.IsInf(x, 0) {
		m.ring[m.next] = x
		m.next = (m.next + 1) % len(m.ring)
		if m.count < len(m.ring) {
			m.count++
		}
	}
	return m.Value()
}

// Value implements Filter. Windows are small (single digits), so sorting a
// copy each time is cheaper and simpler than a two-heap structure.
func (m *MovingMedian) Value() (float64, bool) {
	if m.count == 0 {
		return 0, false
	}
	s := append(m.scratch[:0], m.ring[:m.count]...)
	slices.Sort(s)
	mid := m.count / 2
	if m.count%2 == 1 {
		return s[mid], true
	}
	return (s[mid-1] + s[mid]) / 2, true
}

// Reset implements Filter.
func (m *MovingMedian) Reset() { m.next, m.count = 0, 0 }
