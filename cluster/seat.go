package cluster

import (
	"iter"
	"slices"
	"time"

	"github.com/sanqos/sanqos/control"
)

// Seat is one agent's part in one resource's shared control: the state
// the cluster's rules read and change, with none of etcd's handles. Node
// keeps one per resource beside its elections and watches (resState), and
// changes it only through the functions of this file.
type Seat struct {
	// Ind is the agent's last indicator of the resource (Node.Publish).
	Ind Indicator
	// F is the follower side: the last shared record, the step applied.
	F Follower
	// Leading: the agent leads the resource, since Since, with the shared
	// controller L; Pending is the record L made that the publisher has
	// not written yet.
	Leading bool
	Since   time.Time
	L       Leader
	Pending *Shared
	// Agents are, on the leader, every agent's last indicator, and Heard
	// when each came live (the agent's clock): only an agent heard within
	// Fresh is handed a resource.
	Agents map[string]Indicator
	Heard  map[string]time.Time
	// Looked is when the balancer last read the resource's election line;
	// Yield is the candidate the leader's records ask to step back
	// (Balance); Yielded is the key revision of the last yield asked of
	// this agent, so that one request acts once.
	Looked  time.Time
	Yield   Candidate
	Yielded int64
}

// NewSeat is a seat in local control that has heard nothing yet.
func NewSeat() Seat {
	return Seat{F: Follower{Mode: ModeLocal}, Agents: map[string]Indicator{}, Heard: map[string]time.Time{}}
}

// Tick is one control tick of agent id for the resource (Node.Delay): on
// the leader the shared controller first runs one step (see lead), then
// the follower's rule gives the step to apply and its mode. newCtrl
// rebuilds the controller after a renewal; if it fails, the leader keeps
// the old step and Tick returns the error. led is what the leader did,
// for the caller's log and publisher.
func (s *Seat) Tick(id string, local int, t Timing, step time.Duration, now time.Time,
	newCtrl func() (control.Controller, error)) (applied int, mode Mode, led Lead, err error) {
	if s.Leading {
		led, err = s.lead(id, t, step, now, newCtrl)
	}
	applied, mode = s.F.Step(t, local, now)
	return applied, mode, led, err
}

// lead runs the shared controller one tick (Leader.Step) over every
// agent's indicator, the leader's own from memory (fresher than its echo
// from etcd), and queues its record, with the yield the balancer asks for,
// for the publisher. The leader follows its record at once rather than
// when etcd echoes it a tick later; the record's freshness stays that of
// the last one etcd confirmed (Follower.Own).
func (s *Seat) lead(id string, t Timing, step time.Duration, now time.Time, newCtrl func() (control.Controller, error)) (Lead, error) {
	if !s.L.HasController() { // Renew: a new policy's gains and threshold
		ctrl, err := newCtrl()
		if err != nil {
			return Lead{}, err
		}
		s.L.Renewed(ctrl)
	}
	l := s.L.Step(id, s.Ind, s.Agents, &s.F, t, step, now)
	if l.Rec != nil {
		l.Rec.Yield, l.Rec.YieldRev = s.Yield.ID, s.Yield.Rev
		s.Pending = l.Rec
		s.F.Own(*l.Rec)
	}
	return l, nil
}

// Elected starts a leadership at now with a new controller; the caller
// has read every agent's indicator into Agents.
func (s *Seat) Elected(ctrl control.Controller, now time.Time) {
	s.Leading, s.Since, s.Yield = true, now, Candidate{}
	s.L.Elected(ctrl)
}

// Renew has the leader rebuild its shared controller at its next tick (a
// new policy's gains and threshold), going on from the step in force.
func (s *Seat) Renew() {
	if s.Leading {
		s.L.Drop()
	}
}

// Hear takes agent id's indicator into the leader's view; live means it
// came from the watch at now, which proves the agent alive.
func (s *Seat) Hear(id string, ind Indicator, live bool, now time.Time) {
	s.Agents[id] = ind
	if live {
		s.Heard[id] = now
	}
}

// Forget drops an agent whose indicator was deleted (its lease expired).
func (s *Seat) Forget(id string) {
	delete(s.Agents, id)
	delete(s.Heard, id)
}

// Receive takes a shared record (Follower.Receive) and reports whether it
// asks agent id to step back in the election line: a live record whose
// yield names id at a revision not acted on yet, while id is a candidate
// (campaigning) that does not lead. The caller then requeues its campaign.
func (s *Seat) Receive(rec Shared, live bool, now time.Time, id string, campaigning bool) bool {
	if !s.F.Receive(rec, live, now) || !live || rec.Yield != id || rec.YieldRev <= s.Yielded || s.Leading || !campaigning {
		return false
	}
	s.Yielded = rec.YieldRev
	return true
}

// Load is an agent's leadership load over the seats it holds: how many
// resources it leads and its fair share of them (ShareOf over each, as
// far as it knows: Seen).
func Load(id string, seats iter.Seq[*Seat]) (leads int, share float64) {
	for s := range seats {
		if s.Leading {
			leads++
		}
		share += ShareOf(Seen(s.Leading, id, s.Agents, &s.F))
	}
	return leads, share
}

// handOverReads bounds the election reads (and so the handovers) of one
// look of the balancer.
const handOverReads = 4

// Look is one look of a leader's balancer (see Node.balance for the
// rule): its load, taken when the look starts, and the moves it has made.
// Each move counts at once in both loads, its own and the taker's, so one
// look never hands more than the rule allows.
type Look struct {
	id    string
	leads int
	share float64
	fresh time.Duration
	given map[string]int // this look's moves, by taker
}

// NewLook starts a look of agent id over the seats it holds; fresh is how
// recently an agent must have come live to take a resource.
func NewLook(id string, seats iter.Seq[*Seat], fresh time.Duration) *Look {
	leads, share := Load(id, seats)
	return &Look{id: id, leads: leads, share: share, fresh: fresh, given: map[string]int{}}
}

// Leads is how many resources the looker leads, less those this look has
// handed over; Share is its fair share.
func (l *Look) Leads() int     { return l.leads }
func (l *Look) Share() float64 { return l.share }

// lighter reports whether some live agent of s is light enough to take
// the resource (AnyLighter): only then is its line worth a read.
func (l *Look) lighter(s *Seat, now time.Time) bool {
	return AnyLighter(l.id, l.leads, l.share, s.Agents, LiveLoads(s.Agents, s.Heard, nil, l.fresh, now))
}

// PickReads chooses the resources whose election lines the look reads:
// of those led for at least hold where some live agent is light enough,
// the handOverReads read least recently, in that order (so one
// resource's line does not block the others; a stable order, so a model
// that holds them in a fixed order stays deterministic). It marks them
// read at now, and clears the yield of every resource where no agent is
// light enough. In a balanced cluster it picks none, and a look costs no
// read. seat gives each T's Seat.
func PickReads[T any](l *Look, all iter.Seq[T], seat func(T) *Seat, hold time.Duration, now time.Time) []T {
	var cands []T
	for x := range all {
		s := seat(x)
		if !s.Leading || now.Sub(s.Since) < hold {
			continue
		}
		if l.lighter(s, now) {
			cands = append(cands, x)
		} else {
			s.Yield = Candidate{}
		}
	}
	slices.SortStableFunc(cands, func(a, b T) int { return seat(a).Looked.Compare(seat(b).Looked) })
	cands = cands[:min(len(cands), handOverReads)]
	for _, x := range cands {
		seat(x).Looked = now
	}
	return cands
}

// Decide is the look's decision on one read of s's election line
// (line[0] is the looker), with the agents' loads as live at now
// (Balance). To hand the resource over (next, the taker, whose load
// before the move is taker) it ends the leadership in the seat — the
// caller then resigns and campaigns again, behind the taker — and counts
// the move. Otherwise the seat keeps the yield Balance asks for; newYield
// says it is a new request (the caller logs it).
func (l *Look) Decide(s *Seat, line []Candidate, now time.Time) (next string, taker Indicator, newYield bool) {
	next, yield := Balance(l.leads, l.share, line, LiveLoads(s.Agents, s.Heard, l.given, l.fresh, now))
	if next == "" {
		newYield = yield.ID != "" && yield != s.Yield
		s.Yield = yield
		return "", Indicator{}, newYield
	}
	taker = s.Agents[next]
	taker.Leads += l.given[next]
	s.Leading, s.Pending, s.Yield = false, nil, Candidate{}
	s.L.Drop()
	l.leads--
	l.given[next]++
	return next, taker, false
}
