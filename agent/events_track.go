package agent

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// The events stage (events.go): after shape, each consumer's setting is
// what the backend applies this tick; compared with what it was, it says
// whom the resource started or stopped slowing. Only consumers that are
// slowed or spared are remembered, by consumer index (carried over by
// address when the plan changes), and a tick in which nothing changes
// allocates nothing.

// direction is what a consumer is slowed in.
type direction uint8

const (
	dirNone direction = iota
	dirRead
	dirWrite
	dirBoth
)

func (d direction) String() string {
	return [...]string{"", "read", "write", "both"}[d]
}

// directionOf is s's direction: each delay counts when it is at least
// half the larger one and more than one delay step (step), or the larger
// itself. A sliver on the lesser direction (cost.Split: a backup's
// command PDUs priced as writes, rounded up to one step) does not make a
// reader "both"; a setting with only rate caps is slowed in the
// direction it caps.
func directionOf(s throttle.Setting, step time.Duration) direction {
	hi := max(s.ReadDelay, s.WriteDelay)
	counts := func(d time.Duration) bool { return d > 0 && (d == hi || (2*d >= hi && d > step)) }
	r, w := counts(s.ReadDelay), counts(s.WriteDelay)
	if hi == 0 {
		r, w = s.Rate > 0, s.WriteRate > 0
	}
	switch {
	case r && w:
		return dirBoth
	case r:
		return dirRead
	case w:
		return dirWrite
	}
	return dirNone
}

// dirSettle is how many ticks a new direction must last before it is an
// event: a mixed consumer whose lesser direction hovers at half the
// larger one would otherwise change direction every other tick.
const dirSettle = 5

// atMaxRelease is the fraction of max_delay a pinned consumer's delay
// must fall under before reaching max_delay again is a new event: a
// controller that regulates at the cap moves a step below it and back.
const atMaxRelease = 0.9

// heldSettle is how many ticks a consumer held once must run slowed
// before going idle again is a new held event (5 s at 100 ms): a consumer
// slowed so much that some ticks see none of its requests complete is
// idle every few ticks (simulator, mixed: a checkpoint at 60 ms; lab
// mixed at 15 ms, scale 0.5: the checkpoint host held 10 times in 45 s
// with a 10-tick settle, every 2-5 s).
const heldSettle = 50

// tracked is what the events remember of one consumer.
type tracked struct {
	slowed, held, atMax, spared bool
	wasHeld                     bool  // held since it was slowed
	active                      uint8 // ticks slowed and not held since (to heldSettle)
	dir, pend                   direction
	pendN                       uint8
}

// eventTracker is one resource's memory of whom it slows: by consumer
// index of plan at (zero: neither slowed nor spared). A map by address
// cost a fifth of a 10,000-consumer tick's events stage.
type eventTracker struct {
	cur []tracked
	at  *plan
	// total is this tick's summed load of the consumers (the share's
	// denominator), computed when the first event needs it; < 0: not yet.
	total float64
}

// eventTick is one resource's tick as the events stage sees it: values,
// not the status (a pointer to it made each tick's status escape to the
// heap: 1,000 allocations a tick at 1,000 resources).
type eventTick struct {
	rs                 *resourceState
	name               string
	indicatorMs, thrMs float64
	delay              time.Duration
	now                time.Time
}

// track is the events stage: it compares each consumer's setting this
// tick (rs.set, after the idle hold and the rise limit: what is applied)
// with last tick's and emits an event for each change of whom the
// resource slows.
func (l *Loops) track(rs *resourceState, name string, st *ResourceStatus, now time.Time) {
	tr := &rs.ev
	tr.total = -1
	var gone []netip.Addr
	if tr.at != rs.plan {
		gone = tr.realign(rs.plan)
	}
	et := eventTick{rs: rs, name: name, indicatorMs: st.IndicatorMs, thrMs: st.ThresholdMs, delay: st.Delay, now: now}
	set := rs.set
	for i := range rs.in.Consumers {
		c := &rs.in.Consumers[i]
		s := set[i]
		prev := tr.cur[i]
		had := prev.slowed || prev.spared
		slowed := !s.IsZero()
		spared := !slowed && c.Important && st.Delay > 0 && qualifies(c, &rs.in)
		if !had && !slowed && !spared {
			continue
		}
		cur := l.trackConsumer(et, c, s, prev, slowed)
		if spared && !prev.spared {
			l.emit(l.event(et, c, EventSpared, s, "important: never slowed, though it "+qualifyReason(c, &rs.in)))
		}
		cur.spared = spared
		if !cur.slowed && !cur.spared {
			cur = tracked{}
		}
		tr.cur[i] = cur
	}
	for _, a := range gone {
		l.emit(Event{Time: now, Resource: name, Consumer: a.String(), Kind: EventRelease, IndicatorMs: JSONFloat(round2(st.IndicatorMs)),
			ThresholdMs: st.ThresholdMs, Reason: "left the resource (logged out, or no longer on its devices)"})
	}
}

// realign lays the memory out for plan p, by address, and returns the
// slowed consumers that are not in p: they left the resource.
func (tr *eventTracker) realign(p *plan) (gone []netip.Addr) {
	old, was := tr.at, tr.cur
	tr.at, tr.cur = p, make([]tracked, len(p.consumers)+len(p.static))
	for j, t := range was {
		if !t.slowed && !t.spared {
			continue
		}
		a := old.addr(j)
		if k, ok := p.indexOf(a); ok {
			tr.cur[k] = t
		} else if t.slowed {
			gone = append(gone, a)
		}
	}
	return gone
}

// trackConsumer is one consumer's transition: the events it causes, and
// what to remember of it.
func (l *Loops) trackConsumer(et eventTick, c *ConsumerInput, s throttle.Setting, prev tracked, slowed bool) tracked {
	held := et.rs.held.holding(c.Addr)
	switch {
	case slowed && !prev.slowed:
		d := directionOf(s, l.cfg.DelayStep)
		l.emit(l.event(et, c, EventSlow, s, slowReason(c, &et.rs.in, s, et.rs.policy.Name())))
		return tracked{slowed: true, held: held, atMax: l.pinned(s), dir: d}
	case !slowed && prev.slowed:
		l.emit(l.event(et, c, EventRelease, s, releaseReason(c, prev, et.delay)))
		return tracked{}
	case !slowed:
		return prev
	}
	cur := prev
	if held && !prev.held && (!prev.wasHeld || prev.active >= heldSettle) {
		l.emit(l.event(et, c, EventHeld, s, "held while idle: it keeps its delays for its next burst (idle_hold)"))
	}
	cur.held = held
	switch {
	case held:
		cur.wasHeld, cur.active = true, 0
	case cur.active < heldSettle:
		cur.active++
	}
	switch hi := max(s.ReadDelay, s.WriteDelay); {
	case l.pinned(s) && !prev.atMax:
		l.emit(l.event(et, c, EventAtMax, s, fmt.Sprintf("pinned at max_delay %v: the read wait stays above the threshold", l.cfg.MaxDelay)))
		cur.atMax = true
	case prev.atMax && float64(hi) < atMaxRelease*float64(l.cfg.MaxDelay):
		cur.atMax = false
	}
	// At max_delay every consumer is slowed both ways (directed), and a
	// held consumer keeps its last delays: neither is a new direction.
	d := directionOf(s, l.cfg.DelayStep)
	switch {
	case cur.atMax || held || d == cur.dir || d == dirNone:
		cur.pendN = 0
	case d != cur.pend:
		cur.pend, cur.pendN = d, 1
	default:
		cur.pendN++
	}
	if cur.pendN >= dirSettle {
		l.emit(l.event(et, c, EventDirection, s, fmt.Sprintf("direction changed: %s, was %s (its load: %.0f%% reads)", d, cur.dir, 100*c.Load.ReadFraction())))
		cur.dir, cur.pendN = d, 0
	}
	return cur
}

// pinned says s is at max_delay in some direction.
func (l *Loops) pinned(s throttle.Setting) bool {
	return l.cfg.MaxDelay > 0 && max(s.ReadDelay, s.WriteDelay) >= l.cfg.MaxDelay
}

// event builds an event of c's with this tick's figures.
func (l *Loops) event(et eventTick, c *ConsumerInput, k EventKind, s throttle.Setting, reason string) Event {
	tr := &et.rs.ev
	if tr.total < 0 {
		tr.total = 0
		for _, x := range et.rs.in.Consumers {
			tr.total += x.Load.Total()
		}
	}
	e := Event{Time: et.now, Resource: et.name, Consumer: c.Addr.String(), Kind: k, IndicatorMs: JSONFloat(round2(et.indicatorMs)),
		ThresholdMs: et.thrMs, Queue: round2(c.Queue), ReadMBs: round2(c.ReadEWMA / 1e6), WriteMBs: round2(c.WriteEWMA / 1e6), Reason: reason}
	if tr.total > 0 {
		e.Share = math.Round(1000*c.Load.Total()/tr.total) / 1000
	}
	if k != EventRelease && k != EventSpared {
		e.Direction = directionOf(s, l.cfg.DelayStep).String()
		e.ReadDelayMs, e.WriteDelayMs = ms(s.ReadDelay), ms(s.WriteDelay)
	}
	return e
}

// qualifies says c meets one of the default policy's rules for slowing
// (saturation.go), whatever its class.
func qualifies(c *ConsumerInput, in *PolicyInput) bool {
	return c.Static || c.WriteEWMA > in.WriteBps || saturates(c, in.BulkQueue, in.ReadBps)
}

// qualifyReason words the first rule c meets.
func qualifyReason(c *ConsumerInput, in *PolicyInput) string {
	switch {
	case in.BulkQueue > 0 && c.Queue >= in.BulkQueue:
		return fmt.Sprintf("saturates the resource: %.1f requests queued ≥ throttleable_queue %g", c.Queue, in.BulkQueue)
	case readsInBulk(c, in.ReadBps):
		return fmt.Sprintf("saturates the resource: reads %.3g MB/s > throttleable_read_mb_s %g, %.0f KiB a read", c.ReadEWMA/1e6, in.ReadBps/1e6, c.ReadSize/1024)
	case c.WriteEWMA > in.WriteBps:
		return fmt.Sprintf("writes %.3g MB/s > throttleable_write_mb_s %g", c.WriteEWMA/1e6, in.WriteBps/1e6)
	case c.Static:
		return "is listed throttleable"
	}
	return "saturated the resource, which is still being regulated"
}

// slowReason is why c starts to be slowed by s: the default policies'
// rule it meets, the rate lever's cap, or the policy that asked.
func slowReason(c *ConsumerInput, in *PolicyInput, s throttle.Setting, policy string) string {
	switch {
	case s.ReadDelay == 0 && s.WriteDelay == 0:
		return "rate cap past max_delay (rate_lever_steps)"
	case policy != "read-over-write" && policy != "important-sets":
		return "policy " + policy
	case c.Static:
		return "listed throttleable"
	}
	return qualifyReason(c, in)
}

// releaseReason is why a consumer slowed last tick is not this tick,
// with the controller's delay this tick.
func releaseReason(c *ConsumerInput, prev tracked, delay time.Duration) string {
	switch {
	case prev.held && idle(c):
		return "released: idle longer than idle_hold"
	case delay == 0:
		return "released: resource below threshold"
	}
	return "released: no longer saturates the resource"
}
