package control

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// PIDConfig parameterises the single-sided PID. The time parameters are
// durations rather than the thesis' bare numbers (Ti = 500, Td = 1, T = 16,
// whose unit the thesis never states) because only the ratios T/Ti and
// Td/T enter the discrete law; durations keep them right when the sample
// interval changes.
type PIDConfig struct {
	// Threshold is the set point: the largest acceptable measured value
	// (e.g. read wait in ms). e = measured − Threshold.
	Threshold float64
	// Kp is the proportional gain in steps per unit of error.
	Kp float64
	// Interval is the sample interval T: the time between Updates.
	Interval time.Duration
	// Ti is the integral time; Kp·T/Ti is the integral gain per tick.
	Ti time.Duration
	// Td is the derivative time; 0 makes the controller a PI.
	Td time.Duration
	// MaxSteps is u_max: the output and the integral are clamped to
	// [0, MaxSteps].
	MaxSteps int
	// Step is the delay one step stands for (see Step()).
	Step time.Duration
	// ReleaseBand and ReleaseFactor shape how fast the throttle is given
	// back once the resource is clearly healthy: while measured ≤
	// Threshold·(1−ReleaseBand) the integral is additionally multiplied by
	// ReleaseFactor each tick. ReleaseFactor = 1 disables this (pure
	// equation). See the PID type for why it exists.
	ReleaseBand   float64
	ReleaseFactor float64
	// ReleaseAfter is how many consecutive Updates the measurement must
	// stay below the band before ReleaseFactor applies (0 and 1: at
	// once). A noisy wait — random reads behind random I/O — dips under
	// the band for a tick or two while the load still needs the whole
	// throttle; halving on such a dip gave back 60 % of it in two ticks
	// and cost the reader a second above the threshold (lab mixed,
	// 2026-11-26). A load that has ended stays below.
	ReleaseAfter int
}

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("control: invalid configuration")

// Validate rejects configurations the law cannot run with: zero or negative
// gains and times would divide by zero, flip the sign of the loop (throttle
// harder as the resource recovers) or never act.
func (c PIDConfig) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case !finite(c.Threshold) || c.Threshold <= 0:
		return bad("threshold must be finite and > 0, got %v", c.Threshold)
	case !finite(c.Kp) || c.Kp <= 0:
		return bad("Kp must be finite and > 0, got %v", c.Kp)
	case c.Interval <= 0:
		return bad("interval must be > 0, got %v", c.Interval)
	case c.Ti <= 0:
		return bad("Ti must be > 0, got %v (an integral time of 0 is an infinite integral gain)", c.Ti)
	case c.Td < 0:
		return bad("Td must be ≥ 0, got %v", c.Td)
	case c.MaxSteps < 1:
		return bad("MaxSteps must be ≥ 1, got %d", c.MaxSteps)
	case c.Step <= 0:
		return bad("step must be > 0, got %v", c.Step)
	case !finite(c.ReleaseBand) || c.ReleaseBand < 0 || c.ReleaseBand >= 1:
		return bad("ReleaseBand must be in [0, 1), got %v", c.ReleaseBand)
	case !finite(c.ReleaseFactor) || c.ReleaseFactor < 0 || c.ReleaseFactor > 1:
		return bad("ReleaseFactor must be in [0, 1], got %v", c.ReleaseFactor)
	case c.ReleaseAfter < 0:
		return bad("ReleaseAfter must be ≥ 0, got %v", c.ReleaseAfter)
	}
	return nil
}

// PID is the thesis' single-sided PID (equation 4.2, corrected), written in
// the positional form of the slides' flowchart:
//
//	Up = Kp·e_k
//	Ui = Ui_{k−1} + Kp·(T/Ti)·e_k          clamped to [0, u_max]
//	Ud = Kp·(Td/T)·(e_k − e_{k−1})
//	u_k = Up + Ui + Ud                      clamped to [0, u_max]
//	step = ⌈u_k⌉
//
// Where no clamp is active, u_k − u_{k−1} is exactly the velocity form of
// the design brief,
//
//	u_k = u_{k−1} + Kp[(1 + T/Ti)e_k − e_{k−1}] + (Kp·Td/T)(e_k − 2e_{k−1} + e_{k−2})
//
// (TestPIDMatchesVelocityForm checks this). Equation 4.2 as printed drops
// e_k from the first term and listing A.2 runs the same typo,
// `$Kp*(1-($T/$Ti)) + $Kp*$prev_devs[0]`: a constant 0.29 step/tick bias
// toward "unthrottle" plus an integrator of gain Kp per tick. We implement
// the equation, not the listing.
//
// Why the positional form and not the velocity form the thesis wrote:
// in velocity form the state is the clamped output itself. While the output
// sits at 0 and e is negative, the negative P contribution is clipped away
// and forgotten, so when e then rises back toward 0 (still ≤ 0) the
// difference term Kp(e_k − e_{k−1}) is positive and the controller starts
// throttling a healthy resource (e = −7, −7, 0 gives 2.1 → 3 steps at e = 0).
// Keeping Ui as its own clamped state, as the flowchart does, removes that:
// P and D act around the integral instead of being accumulated into it.
//
// Single-sided, precisely: while e ≤ 0 the P and D parts may only lower the
// output (u ≤ Ui) and the integral can only shrink, so a healthy resource is
// never newly throttled; the output can only rise while the measurement is
// above the threshold. A throttle already found necessary (Ui > 0) is held,
// reduced, while e hovers just below zero; forcing u = 0 on every e ≤ 0 tick
// would make the loop chatter between 0 and Ui around the set point, since
// a sustained interfering load needs a sustained throttle to sit at e ≈ 0.
//
// Release: with the thesis' gains the integral gives back only
// Kp·T/Ti·|e| ≈ 0.01·|e| step per tick, so after the interfering load stops
// a 40-step throttle would linger for minutes. The controller cannot tell
// "load gone" from "throttle just right" (both give e < 0), but it can tell
// "clearly healthy" from "hovering": below Threshold·(1−ReleaseBand) the
// integral is also multiplied by ReleaseFactor per tick (halved by default,
// 40 → 0 in about six ticks, which the P part shortens). If the load is
// still there the measurement climbs back above the band and the normal,
// symmetric law takes over from the lower level — so the cost is a dip in
// throttle, never a stuck one. Inside the band the law stays symmetric,
// so steady-state regulation at the threshold is not biased by the release
// rule unless the filtered signal's noise exceeds the band.
type PID struct {
	cfg            PIDConfig
	kp, ki, kd     float64
	ui             float64
	u              float64
	ePrev          float64
	started        bool
	releaseBelow   float64
	releaseFactor  float64
	out            int
	lastP, lastD   float64
	lastMeasured   float64
	lastError      float64
	updates        uint64
	ignoredSamples uint64
	// hold suspends the release rule for this many Updates after a
	// Preload (onset.go).
	hold int
	// below counts consecutive Updates under the release band.
	below int
}

// NewPID validates cfg and returns an unthrottled controller.
func NewPID(cfg PIDConfig) (*PID, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	T := cfg.Interval.Seconds()
	return &PID{
		cfg:           cfg,
		kp:            cfg.Kp,
		ki:            cfg.Kp * T / cfg.Ti.Seconds(),
		kd:            cfg.Kp * cfg.Td.Seconds() / T,
		releaseBelow:  cfg.Threshold * (1 - cfg.ReleaseBand),
		releaseFactor: cfg.ReleaseFactor,
	}, nil
}

// Config returns the configuration the controller runs with.
func (p *PID) Config() PIDConfig { return p.cfg }

// Update implements Controller.
func (p *PID) Update(measured float64) int {
	if !finite(measured) {
		p.ignoredSamples++
		return p.out
	}
	p.updates++
	e := measured - p.cfg.Threshold
	if !p.started {
		// No history yet: take e_{k−1} = e_k so the first tick carries no
		// derivative kick from an imaginary zero error.
		p.ePrev, p.started = e, true
	}
	umax := float64(p.cfg.MaxSteps)

	// Clamping Ui (rather than holding it at Ui_{k−1} as the flowchart
	// does) lets the integral alone reach u_max; either bounds windup.
	ui := p.ui + p.ki*e
	if measured <= p.releaseBelow && e <= 0 {
		p.below++
	} else {
		p.below = 0
	}
	switch {
	case p.hold > 0:
		// After a preload the integral already stands for the load: the
		// surge's own error, which the preload answers before the wait
		// shows it, must not wind it further (P still acts on it), and
		// the release rule waits until the surge can have been seen.
		ui = math.Min(ui, p.ui)
		p.hold--
	case p.below > 0 && p.below >= p.cfg.ReleaseAfter:
		ui *= p.releaseFactor
	}
	p.ui = clamp(ui, 0, umax)

	up := p.kp * e
	ud := p.kd * (e - p.ePrev)
	u := up + p.ui + ud
	if e <= 0 && u > p.ui {
		u = p.ui
	}
	p.u = clamp(u, 0, umax)
	p.out = ceilStep(p.u, p.cfg.MaxSteps)

	p.ePrev = e
	p.lastP, p.lastD, p.lastMeasured, p.lastError = up, ud, measured, e
	return p.out
}

// Output implements Controller.
func (p *PID) Output() int { return p.out }

// Preload raises the integral, and with it the output, to at least level
// steps (clamped to [0, u_max]) without a measurement, and for the next
// hold Updates lets the integral only fall, by its ordinary law, never
// rise or be halved by the release rule: the feed-forward of onset.go.
// The ordinary law continues from the new integral, so the hand-back to
// feedback control is bumpless. A level below the current integral
// changes nothing: feed-forward never loosens a throttle.
func (p *PID) Preload(level float64, hold int) int {
	if !finite(level) || level <= p.ui {
		return p.out
	}
	p.ui = clamp(level, 0, float64(p.cfg.MaxSteps))
	p.u = math.Max(p.u, p.ui)
	p.out = ceilStep(p.u, p.cfg.MaxSteps)
	p.hold = max(p.hold, hold)
	return p.out
}

// HoldIntegral keeps the integral from rising on the next Update, as a
// preload's hold does (it may fall by its ordinary law; the release rule
// waits): the output it stands for is not applied yet, so the error that
// remains is not the output's to answer.
func (p *PID) HoldIntegral() { p.hold = max(p.hold, 1) }

// Delay returns the packet delay of the current output.
func (p *PID) Delay() time.Duration { return Step(p.out, p.cfg.Step) }

// Reset implements Controller.
func (p *PID) Reset() {
	p.ui, p.u, p.ePrev, p.started, p.out, p.hold, p.below = 0, 0, 0, false, 0, 0, 0
	p.lastP, p.lastD, p.lastMeasured, p.lastError = 0, 0, 0, 0
}

// PIDState is the controller's internals after the last Update, for traces
// and the dashboard.
type PIDState struct {
	Measured, Error float64
	P, I, D         float64
	U               float64 // continuous output after clamping
	Step            int
	Updates         uint64
	Ignored         uint64 // non-finite measurements skipped
}

// State returns the internals after the last Update.
func (p *PID) State() PIDState {
	return PIDState{
		Measured: p.lastMeasured, Error: p.lastError,
		P: p.lastP, I: p.ui, D: p.lastD, U: p.u, Step: p.out,
		Updates: p.updates, Ignored: p.ignoredSamples,
	}
}

var _ Controller = (*PID)(nil)
