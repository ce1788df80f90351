package control

import (
	"fmt"
	"time"
)

// AIMDConfig parameterises the PARDA-style controller.
type AIMDConfig struct {
	// Threshold is the latency set point L (same unit as measurements).
	Threshold float64
	// Gamma ∈ (0, 1] is PARDA's smoothing of the window update.
	Gamma float64
	// Beta ≥ 0 is the additive increase of the window per tick, as a
	// fraction of the full (unthrottled) window.
	Beta float64
	// MaxSteps and Step as for PIDConfig.
	MaxSteps int
	Step     time.Duration
}

// DefaultAIMDConfig returns γ = 0.2 and β = 0.01 (a full window back in
// roughly 100 healthy ticks from β alone; the latency ratio does most of it).
func DefaultAIMDConfig(threshold float64) AIMDConfig {
	return AIMDConfig{Threshold: threshold, Gamma: 0.2, Beta: 0.01, MaxSteps: DefaultMaxSteps, Step: DefaultStep}
}

// Validate rejects zero or negative parameters.
func (c AIMDConfig) Validate() error {
	switch {
	case !finite(c.Threshold) || c.Threshold <= 0:
		return fmt.Errorf("%w: threshold must be finite and > 0, got %v", ErrConfig, c.Threshold)
	case !finite(c.Gamma) || c.Gamma <= 0 || c.Gamma > 1:
		return fmt.Errorf("%w: gamma must be in (0, 1], got %v", ErrConfig, c.Gamma)
	case !finite(c.Beta) || c.Beta < 0:
		return fmt.Errorf("%w: beta must be ≥ 0, got %v", ErrConfig, c.Beta)
	case c.MaxSteps < 1:
		return fmt.Errorf("%w: MaxSteps must be ≥ 1, got %d", ErrConfig, c.MaxSteps)
	case c.Step <= 0:
		return fmt.Errorf("%w: step must be > 0, got %v", ErrConfig, c.Step)
	}
	return nil
}

// AIMD adapts PARDA's per-host window control (Gulati et al., FAST '09)
//
//	w ← (1−γ)·w + γ·(L/ℓ·w + β)
//
// to a delay throttle. w ∈ [0, 1] is the fraction of the unthrottled rate a
// throttled consumer may use; the output is ⌈(1−w)·u_max⌉ steps, using the
// thesis' observation that rate falls close to linearly with added delay.
// Above the threshold the window shrinks multiplicatively by L/ℓ; below it
// grows by the ratio plus the additive β — the AIMD shape, with the
// multiplicative part proportional to how far off the latency is.
//
// It is single-sided like the PID: ℓ ≤ L can only grow w (lower the
// throttle), and w is capped at 1, where the output is 0. The ratio is
// capped at 2 so that an idle resource (ℓ → 0) releases quickly but finitely.
type AIMD struct {
	cfg AIMDConfig
	w   float64
	out int
}

// NewAIMD validates cfg and returns an unthrottled controller.
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &AIMD{cfg: cfg, w: 1}, nil
}

// maxRatio bounds L/ℓ: PARDA never sees ℓ = 0 (a host's latency is at
// least its device's service time), but our indicator can be 0.
const maxRatio = 2

const minWindow = 0.01

// Update implements Controller.
func (a *AIMD) Update(measured float64) int {
	if !finite(measured) || measured < 0 {
		return a.out
	}
	ratio := maxRatio * 1.0
	if measured > 0 {
		ratio = min(a.cfg.Threshold/measured, maxRatio)
	}
	g := a.cfg.Gamma
	w := (1-g)*a.w + g*(ratio*a.w+a.cfg.Beta)
	// The floor bounds windup: multiplicative growth from w has to climb
	// log(1/w) ticks, so a long overload must not drive w toward 0. At
	// 0.01 the output is still u_max for u_max ≤ 100.
	a.w = clamp(w, minWindow, 1)
	a.out = ceilStep((1-a.w)*float64(a.cfg.MaxSteps), a.cfg.MaxSteps)
	return a.out
}

// Output implements Controller.
func (a *AIMD) Output() int { return a.out }

// Window returns w.
func (a *AIMD) Window() float64 { return a.w }

// Delay returns the packet delay of the current output.
func (a *AIMD) Delay() time.Duration { return Step(a.out, a.cfg.Step) }

// Reset implements Controller.
func (a *AIMD) Reset() { a.w, a.out = 1, 0 }

var _ Controller = (*AIMD)(nil)
