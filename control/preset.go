package control

// Preset sets the controller's state so that its output is step, for a
// bumpless transfer: a controller that takes over a running loop (a new
// shared controller in package cluster, started from the agents' local
// outputs or the previous leader's) continues from the output in force
// instead of from zero. The integral carries the whole output (P and D are
// zero at zero error) and the error history is forgotten, so the first
// Update after Preset carries no derivative kick. step is clamped to
// [0, MaxSteps].
func (p *PID) Preset(step int) {
	u := clamp(float64(step), 0, float64(p.cfg.MaxSteps))
	p.ui, p.u, p.started = u, u, false
	p.out = ceilStep(u, p.cfg.MaxSteps)
}
