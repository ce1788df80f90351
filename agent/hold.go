package agent

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// A slowed consumer keeps its delays while it is idle (idle_hold).
//
// The oracle, a static delay on the writers, slows each load step from
// its first segment. The agent slowed it from the tick after its bytes
// showed: a few ticks after a load stops the reader's wait falls, the
// controller releases, the writers leave the throttleable set, and the
// next step's first 100–200 ms reach the disk undelayed, however well the
// onset feed-forward preloads the controller at the first sample. Twelve
// 64 KiB writes queued at once hold the reader's next reads 30–65 ms: in
// the lab (s1-w50, writers at 15 ms) the first second of every load step
// after the first had 5 of its 10 intervals over the threshold where the
// oracle's had none, 25–30 of the phase's budget of 104, which the
// controller then took back from the steady seconds with more delay.
//
// So a consumer slowed while it moved data keeps that setting's delays
// while it moves none, for up to idle_hold: a delay on a connection that
// carries nothing costs nothing, and when it resumes, its first segments
// are slowed as its last ones were. For holdResume ticks after it resumes
// it has the larger of the held delays and the policy's (the onset
// preload's hold, while the set re-forms from smoothed rates); after that
// the policy alone decides, so a consumer that came back light is
// released 300 ms later. Rate caps are not held: the rate lever
// re-applies its own.
const (
	holdResume = onsetHold
	// idleBps is the rate (read + write) under which a consumer moves
	// nothing that a delay could shape: iSCSI NOP-Ins and -Outs and TCP
	// keepalives are bytes per second.
	idleBps = 4 << 10
)

// held is one consumer's held delays.
type held struct {
	s       throttle.Setting // delays only
	idleFor time.Duration    // since it last moved data
	resumed int              // ticks active since its last idle one
	seen    bool             // in this tick's consumers
}

// holds are a resource's held delays, by consumer.
type holds map[netip.Addr]*held

// idle reports whether a consumer moved nothing this tick.
func idle(c *ConsumerInput) bool { return c.ReadBps+c.WriteBps < idleBps }

// apply returns the setting for c this tick: the policy's ask, or, while
// c's delays are held, the larger of each delay.
func (h holds) apply(c ConsumerInput, ask throttle.Setting, dt, hold time.Duration) throttle.Setting {
	e := h[c.Addr]
	if e == nil {
		return ask
	}
	e.seen = true
	if idle(&c) {
		e.idleFor += dt
		e.resumed = 0
		if e.idleFor > hold {
			delete(h, c.Addr)
			return ask
		}
		return maxDelays(ask, e.s)
	}
	if e.idleFor == 0 {
		// Running: the policy decides and record keeps the level; one
		// that releases a consumer still moving data ends its hold.
		if delays(ask).IsZero() {
			delete(h, c.Addr)
		}
		return ask
	}
	if e.resumed++; e.resumed > holdResume {
		delete(h, c.Addr)
		return ask
	}
	return maxDelays(ask, e.s)
}

// record notes what c was given this tick: the delays of a consumer
// slowed while it moved data are what a later idle spell holds.
func (h holds) record(c ConsumerInput, s throttle.Setting) {
	d := delays(s)
	if idle(&c) || d.IsZero() {
		return
	}
	if e := h[c.Addr]; e != nil && e.idleFor > 0 {
		return // resuming: keep the held level until apply lets go
	}
	h[c.Addr] = &held{s: d, seen: true}
}

// prune forgets consumers that were not in this tick's input (logged
// out, or moved to another resource), and clears the marks for the next.
func (h holds) prune() {
	for a, e := range h {
		if !e.seen {
			delete(h, a)
		}
		e.seen = false
	}
}

// holding reports whether a's delays are held now: it is idle, or has
// just resumed, with the delays of its last active tick.
func (h holds) holding(a netip.Addr) bool {
	e := h[a]
	return e != nil && e.idleFor > 0
}

// delays is s without its rate caps, which are not held.
func delays(s throttle.Setting) throttle.Setting {
	return throttle.Setting{ReadDelay: s.ReadDelay, WriteDelay: s.WriteDelay}
}

func maxDelays(a, b throttle.Setting) throttle.Setting {
	a.ReadDelay, a.WriteDelay = max(a.ReadDelay, b.ReadDelay), max(a.WriteDelay, b.WriteDelay)
	return a
}
