package throttle

import "time"

// Why the delay line ramps: a TCP sender sends a tail-loss probe when no
// ACK comes within 2·srtt + 2 ms (Linux; srtt smoothed by 1/8 per ACK),
// so a delay that jumps from ~0 to 12 ms between two ACKs makes every
// throttled writer probe (spuriously: the ACK was only late), and the
// agent's load steps did that to each writer at each step. Growing the
// delay by at most Ramp ms per ms of the consumer's traffic lets srtt
// follow (each round trip is at most 1 + Ramp times the last), yet reaches
// 30 ms in 60 ms at 0.5: within one 100 ms tick, unlike a per-tick bound.
// Decreases are immediate.

// rampGap caps the time one packet may advance a ramp: after a pause the
// sender's srtt still holds the delay of before the pause, so idle time
// must not count as time to adapt.
const rampGap = 2 * time.Millisecond

// ramp is one consumer's delay in one direction as applied, growing
// toward its setting.
type ramp struct {
	eff int64 // ns applied to the last packet
	at  int64 // monotonic ns of the last packet
}

// next returns the delay for a packet at t whose consumer's setting is
// target, with rate ns of growth allowed per ns of traffic (≤ 0: none).
func (r *ramp) next(target, t int64, rate float64) int64 {
	if rate <= 0 || target <= r.eff {
		r.eff, r.at = target, t
		return target
	}
	dt := min(max(t-r.at, 0), int64(rampGap))
	r.eff = min(target, r.eff+int64(rate*float64(dt)))
	r.at = t
	return r.eff
}

// flowRamp is one flow's ramp state: per direction (payload: read delay,
// pure ACKs: write delay) with Ramp, both ends' srtt models with Follow.
type flowRamp struct {
	ramp   [2]ramp
	follow follow
}

func (r *flowRamp) last() int64 {
	return max(r.ramp[0].at, r.ramp[1].at, r.follow.last())
}

// rampIdle is how long a flow may send nothing before its ramp is
// forgotten; sweepRamps looks at most once per rampIdle.
const rampIdle = 10 * time.Second

// sweepRamps forgets the ramps of flows idle for rampIdle, so closed
// connections do not accumulate. A flow that comes back starts from zero,
// as a new connection would. d.mu must be held.
func (d *DelayLine) sweepRamps(t int64) {
	if t-d.swept < int64(rampIdle) {
		return
	}
	d.swept = t
	for k, r := range d.ramps {
		if t-r.last() >= int64(rampIdle) {
			delete(d.ramps, k)
		}
	}
}
