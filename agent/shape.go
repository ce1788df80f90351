package agent

import (
	"net/netip"

	"github.com/sanqos/sanqos/throttle"
)

// shape is the shape stage: each setting after the rise limits (written
// back into out, so status shows what is asked) into rs.asked, the
// resource's wishes this tick. A read delay always rises
// under riseLimit (readRiseStep unless delay_rise is set); a write delay
// with delay_rise, or under the read's limit where the consumer reads
// (its smoothed read rate is not 0: the target sends it data, which the
// backends hold for the larger of its delays; see readRiseStep). It
// notes whether the limit held any setting below the policy's ask
// (rs.limited), which holds the controller's integral next tick, and
// whether the wishes differ from last tick's (rs.changed). Before
// the limits, a consumer that went idle while slowed keeps its delays
// (idle_hold, hold.go), also where the policy asks nothing of it.
func (l *Loops) shape(rs *resourceState, out *PolicyOutput) {
	// Two maps swapped every tick: last tick's asks and this tick's.
	if rs.spare == nil {
		rs.spare = map[netip.Addr]throttle.Setting{}
	}
	asked := rs.asked
	rs.asked, rs.spare = rs.spare, asked
	clear(rs.asked)
	readStep := l.cfg.RiseStep
	if readStep <= 0 {
		readStep = readRiseStep
	}
	rs.limited, rs.changed = false, false
	// Every setting is an input consumer's (policies and the rate lever
	// key them by PolicyInput.Consumers), whose read rate the write
	// delay's limit needs.
	if l.cfg.IdleHold > 0 && rs.held == nil {
		rs.held = holds{}
	}
	if out.Settings == nil {
		out.Settings = rs.in.settings() // nobody asked, but some may be held
	}
	set := out.Settings
	rs.set = set
	hold := marks(rs.plan, rs.held)
	for k := range rs.in.Consumers {
		c := &rs.in.Consumers[k] // a row is 200 bytes: not copied
		a := c.Addr
		s := set[k]
		if hold[k] {
			s = rs.held.apply(*c, s, l.cfg.Interval, l.cfg.IdleHold)
		}
		if s.IsZero() {
			continue
		}
		p, had := asked[a]
		ask := s
		writeStep := l.cfg.RiseStep
		if writeStep <= 0 && c.ReadEWMA > 0 {
			writeStep = readStep // its data is held for both delays: readRiseStep
		}
		s.WriteDelay = riseLimit(p.WriteDelay, s.WriteDelay, writeStep)
		s.ReadDelay = riseLimit(p.ReadDelay, s.ReadDelay, readStep)
		if s != ask {
			rs.limited = true
		}
		set[k] = s // the policy's buffer, reused next tick
		rs.asked[a] = s
		rs.changed = rs.changed || !had || p != s
		if rs.held != nil {
			rs.held.record(*c, s)
		}
	}
	if rs.held != nil {
		rs.held.prune()
	}
	rs.changed = rs.changed || len(rs.asked) != len(asked)
}
