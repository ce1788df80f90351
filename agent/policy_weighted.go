package agent

import (
	"net/netip"
	"time"
)

// weighted shares a saturated resource by weight: while the controller
// asks for delay, each consumer's fair share is the resource's current
// throughput (reads + writes of everyone) × its weight / the weights of
// all consumers that moved data this tick. A consumer above its share is
// slowed by the controller's delay scaled by how far above it is
// ((x − share) / share, at most 1), in the direction it mostly uses; one
// at or below its share never is, and neither is an important one.
type weighted struct {
	weights map[netip.Addr]float64
}

// Weighted returns the weighted policy; consumers missing from weights
// weigh 1.
func Weighted(weights map[netip.Addr]float64) Policy { return &weighted{weights: weights} }

func (p *weighted) Name() string                   { return "weighted" }
func (p *weighted) IndicatorOfImportantOnly() bool { return false }

func (p *weighted) weight(a netip.Addr) float64 {
	if w, ok := p.weights[a]; ok {
		return w
	}
	return 1
}

func (p *weighted) Decide(in *PolicyInput) PolicyOutput {
	out := PolicyOutput{Settings: in.settings(), Throttleable: in.throttleable()}
	var total, wsum float64
	for _, c := range in.Consumers {
		// Idle consumers claim no share: what they leave is shared by the
		// busy ones (work conserving).
		if x := c.ReadBps + c.WriteBps; x > 0 {
			total += x
			wsum += p.weight(c.Addr)
		}
	}
	if total == 0 || wsum == 0 {
		return out
	}
	for k, c := range in.Consumers {
		x := c.ReadBps + c.WriteBps
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
			out.Settings[c.Addr] = dominantDelay(c, d)
		}
	}
	return out
}
