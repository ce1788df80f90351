package agent

import (
	"math"
	"net/netip"
	"slices"
	"time"
)

// The second lever: write-rate caps above the delay's ceiling.
//
// A delay slows a writer by lengthening each command's round trip, so its
// effect saturates: past some delay a writer with enough commands in
// flight keeps the resource as busy as before, and a threshold close to
// the resource's own service time (10 ms here, with twelve writers) is
// not reached at any delay TCP tolerates. Rather than sit at the ceiling,
// the controller's range is extended past it (split-range control, as a
// process plant sequences two valves on one controller): steps
// 0..maxDelay/step set the delay; the next RateLeverSteps keep the delay
// at its maximum and cap the writers' rates (seed 001's HTB classes, on
// the target's ingress), from 100 % of the rates they had when the delay
// ran out, down to 10 % at the top of the range.
//
// The cap is water-filled over the writers' measured contributions: the
// allowed total is shared so that the heaviest writers are capped first,
// all to one level, and a writer below that level is not capped at all.
// Because it is one controller output, the hand-over is the PID's own
// motion: when the wait recovers, the integral walks back through the cap
// range (caps loosen, then vanish) before the delay starts to fall, and a
// load that returns climbs back through the delays first. No separate
// logic decides which lever acts, so the two cannot fight.

// rateLever holds the writers' rates when the delay ran out: the base the
// caps are fractions of. ref is empty while the controller is in the
// delay range; atMax is each writer's rate the last time the delay sat at
// its maximum with no cap, kept across load steps: a surge that the onset
// feed-forward sends straight into the cap range must not take the
// writers' first, still rising, sample as their rate.
type rateLever struct {
	ref   map[netip.Addr]float64
	order []netip.Addr // ref's writers, heaviest first (ties by address)
	atMax map[netip.Addr]float64
	// last is each writer's cap of the previous tick, the base of the
	// ramp (capRamp).
	last map[netip.Addr]float64
	// ramp is capRamp for the loop's tick (0: no ramp).
	ramp float64
}

// capRamp is how far a writer's cap may fall in one 100 ms tick: to 70 %
// of its last cap (or, when first capped, of its reference rate). A cap
// lengthens the writer's round trip by what its class queues, up to its
// window / cap, and a round trip that grows faster than the writer's
// srtt follows makes it send spurious tail-loss probes (the probe timer
// is 2·srtt + 2 ms) and, past its 200 ms minimum, spurious timeouts
// (lab, 12 writers at 10 ms with caps applied at once: 255 probes, 34
// RTOs in six load steps). A capped writer acknowledged every second
// segment gets dozens of ACKs per tick even at 0.5 MB/s, each moving its
// srtt 1/8 of the way, so by the next tick its srtt has taken most of
// the longer round trip: a round trip that grows by 1/0.7 = 1.43 × per
// tick stays inside twice the srtt. Loosening is not ramped: a shorter
// queue only shortens the round trip.
const capRamp = 0.7

// capRampPer is capRamp for a tick of interval: the same fall per second.
func capRampPer(interval time.Duration) float64 {
	return math.Pow(capRamp, interval.Seconds()/0.1)
}

// observeMax records the writers' rates while the delay is at its maximum
// and no cap applies.
func (l *rateLever) observeMax(writers []netip.Addr, rate func(netip.Addr) float64) {
	if l.atMax == nil {
		l.atMax = map[netip.Addr]float64{}
	}
	for _, a := range writers {
		l.atMax[a] = rate(a)
	}
}

// rateLeverFloor is the fraction of the reference kept at the top of the
// cap range: a writer is slowed, never stopped, so its commands keep
// completing and its initiator sees no timeouts.
const rateLeverFloor = 0.1

// caps returns the write-rate cap of each writer for k steps into a
// range of n (k ≥ 1), given the throttleable writers and their current
// write rates (EWMA). Writers first seen while capping join the reference
// at their current rate.
func (l *rateLever) caps(k, n int, writers []netip.Addr, rate func(netip.Addr) float64) map[netip.Addr]uint64 {
	if l.ref == nil {
		l.ref = map[netip.Addr]float64{}
	}
	added := false
	for _, a := range writers {
		if _, ok := l.ref[a]; !ok {
			r, seen := l.atMax[a]
			if !seen {
				r = rate(a)
			}
			l.ref[a] = r
			added = true
		}
	}
	if added {
		l.order = l.order[:0]
		for a := range l.ref {
			l.order = append(l.order, a)
		}
		slices.SortFunc(l.order, func(a, b netip.Addr) int {
			if l.ref[a] != l.ref[b] {
				if l.ref[a] > l.ref[b] {
					return -1
				}
				return 1
			}
			return a.Compare(b)
		})
	}
	var total float64
	for _, a := range l.order {
		total += l.ref[a]
	}
	keep := 1 - (1-rateLeverFloor)*float64(min(k, n))/float64(n)
	level := waterLevel(l.order, l.ref, keep*total)
	out := make(map[netip.Addr]uint64, len(l.order))
	last := make(map[netip.Addr]float64, len(l.order))
	for _, a := range l.order {
		if l.ref[a] <= level {
			continue
		}
		from, ok := l.last[a]
		if !ok {
			from = l.ref[a]
		}
		c := max(level, l.ramp*from, 1)
		out[a], last[a] = uint64(c), c
	}
	l.last = last
	return out
}

// waterLevel returns L with Σ min(ref_i, L) = allowed, for writers sorted
// heaviest first.
func waterLevel(order []netip.Addr, ref map[netip.Addr]float64, allowed float64) float64 {
	// Walk from the lightest: each writer below the level keeps its rate,
	// the rest share what is left equally.
	rest := allowed
	for i := len(order) - 1; i >= 0; i-- {
		share := rest / float64(i+1)
		if r := ref[order[i]]; r < share {
			rest -= r
			continue
		}
		return share
	}
	return rest // every writer fits: no cap (unreachable for allowed < total)
}

// reset forgets the reference (the controller is back in the delay range).
func (l *rateLever) reset() { l.ref, l.order, l.last = nil, l.order[:0], nil }

// applyRateLever adds write-rate caps to the policy's settings while the
// controller is past the delay range (lever.go). Only the policies whose
// settings are the controller's delay on the throttleable set take part:
// the others map the output to settings of their own.
func (l *Loops) applyRateLever(rs *resourceState, st *ResourceStatus, in *PolicyInput, out PolicyOutput, step int) {
	n := l.cfg.RateLeverSteps
	k := step - int(l.cfg.MaxDelay/l.cfg.DelayStep)
	name := rs.policy.Name()
	if n <= 0 || k < 0 || st.Unreachable || (name != "read-over-write" && name != "important-sets") {
		rs.lever.reset()
		return
	}
	var writers []netip.Addr
	ewma := map[netip.Addr]float64{}
	for i, s := range out.Settings {
		if s.WriteDelay > 0 {
			c := &in.Consumers[i]
			writers, ewma[c.Addr] = append(writers, c.Addr), c.WriteEWMA
		}
	}
	rate := func(a netip.Addr) float64 { return ewma[a] }
	if k == 0 {
		rs.lever.reset()
		rs.lever.observeMax(writers, rate)
		return
	}
	st.RateLeverStep = k
	rs.lever.ramp = capRampPer(l.cfg.Interval)
	for a, c := range rs.lever.caps(k, n, writers, rate) {
		// A capped writer stays slowed even when its capped rate falls
		// below the policy's throttleable threshold: dropping it would
		// release it at full speed into the queue the cap just emptied.
		if i, ok := rs.plan.indexOf(a); ok && i < len(out.Settings) {
			out.Settings[i].WriteDelay, out.Settings[i].WriteRate = in.Output, c
		}
	}
}
