package agent

import (
	"net/netip"
	"time"
)

// weighted shares a saturated resource by weight: while the controller
// asks for delay, each consumer's fair share is the resource's current
// throughput (reads + writes of everyone) × its weight / the weights of
// all consumers that move data. A consumer above its share is
// slowed by the controller's delay scaled by how far above it is
// ((x − share) / share, at most 1), split over the directions it loads
// the resource in (saturation.go's directed); one
// at or below its share never is, and neither is an important one.
// "Moved data" and the rates compared are smoothed per consumer
// (WeightedSmoothing): a delayed writer's 100 ms rate swings between
// nothing and a burst, and on raw ticks the policy put the delay on and
// off every other tick (lab run weighted: the lightest writer undelayed in
// half the ticks at max_delay 50 ms, and thousands of spurious tail-loss
// probes from the toggling).
type weighted struct {
	weights    map[netip.Addr]float64
	rate, next map[netip.Addr]float64 // smoothed read + write B/s
}

// WeightedSmoothing is the time constant of the weighted policy's rates.
const WeightedSmoothing = time.Second

// Weighted returns the weighted policy; consumers missing from weights
// weigh 1.
func Weighted(weights map[netip.Addr]float64) Policy {
	return &weighted{weights: weights, rate: map[netip.Addr]float64{}, next: map[netip.Addr]float64{}}
}

func (p *weighted) Name() string              { return "weighted" }
func (p *weighted) Indicator() IndicatorScope { return IndicatorUnthrottled }

func (p *weighted) weight(a netip.Addr) float64 {
	if w, ok := p.weights[a]; ok {
		return w
	}
	return 1
}

func (p *weighted) Decide(in *PolicyInput) PolicyOutput {
	out := PolicyOutput{Settings: in.settings(), Throttleable: in.throttleable()}
	dt := in.Interval.Seconds()
	alpha := 1.0
	if dt > 0 {
		alpha = dt / (dt + WeightedSmoothing.Seconds())
	}
	// Smooth this tick's rates; consumers gone from the tick are dropped.
	clear(p.next)
	for _, c := range in.Consumers {
		x := c.ReadBps + c.WriteBps
		if s, ok := p.rate[c.Addr]; ok {
			x = s + alpha*(x-s)
		}
		p.next[c.Addr] = x
	}
	p.rate, p.next = p.next, p.rate
	var total, wsum float64
	for _, c := range in.Consumers {
		// Idle consumers claim no share: what they leave is shared by the
		// busy ones (work conserving). 1 kB/s: a smoothed rate decays
		// towards zero but never reaches it.
		if x := p.rate[c.Addr]; x > 1e3 {
			total += x
			wsum += p.weight(c.Addr)
		}
	}
	if total == 0 || wsum == 0 {
		return out
	}
	for k, c := range in.Consumers {
		x := p.rate[c.Addr]
		share := total * p.weight(c.Addr) / wsum
		if c.Important || x <= share {
			continue
		}
		out.Throttleable = append(out.Throttleable, k)
		if in.Output <= 0 {
			continue
		}
		excess := min(1, (x-share)/share)
		d := roundUpStep(time.Duration(float64(in.Output)*excess), in.DelayStep, in.MaxDelay)
		if d > 0 {
			out.Settings[k] = directed(c, d, in)
		}
	}
	return out
}
