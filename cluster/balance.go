package cluster

import (
	"iter"
	"math"
	"time"
)

// balancer hands resources to less loaded agents: one look (balance)
// every BalanceEvery, jittered by ±25 % so that leaders do not all look
// at once on the same stale loads.
func (n *Node) balancer() {
	d := n.cfg.BalanceEvery
	for wait := d; ; wait = d*3/4 + n.rt.Jitter(d/2) {
		if n.rt.Sleep(n.ctx, wait, nil); n.ctx.Err() != nil {
			return
		}
		n.balance()
	}
}

// handCand is a resource this leader may hand over, with the election
// it had when the look picked it.
type handCand struct {
	rs   *resState
	elec Election
}

// balance is one look of the balancer (the rule is Balance). A leader
// over its fair share, whose excess is at least HandOverGap above that of
// the agent next in line for one of its resources, resigns that resource
// and campaigns again at once, so the next in line takes it over (the
// election's order is the candidates' create revisions, so it cannot
// choose another) and it queues behind. When the next in line is not
// light enough but an agent behind it is, the leader's records ask the
// next in line to step back (Shared.Yield): it campaigns again from the
// back, and a later look finds the lighter agent one place closer. It
// looks only at resources it has led for BalanceHold where some live agent
// is light enough, and reads the election of at most handOverReads of them
// per look, those it read least recently first (so one resource's line
// does not block the others). In a balanced cluster no agent is light
// enough, so a look costs no read. Each move counts at once in both loads,
// its own and the taker's, so one look never hands more than the rule
// allows; takers' published loads catch up within a tick or two, before
// the next look. Nothing here can leave a resource without a leader: it
// hands over only to an agent whose indicator came live within Fresh (a
// live agent, campaigning for the resource: it is in line) and stays a
// candidate itself; if the resign fails it is still first in line and
// leads again. The new leader starts from the step in force (Leader.Step
// takes over within Decay), so followers see no gap and no jump.
func (n *Node) balance() {
	look, cands, sess := n.pick(n.cfg.Now())
	for _, c := range cands {
		line, ok := n.readLine(c.rs.name, c.elec)
		if !ok {
			continue
		}
		if h, ok := n.decide(look, c, sess, line); ok {
			n.cfg.Log.Info("handing a resource over to a less loaded agent", "resource", c.rs.name, "to", h.next,
				"leads", h.leads, "share", math.Round(h.share*10)/10, "to_leads", h.taker.Leads, "to_share", math.Round(h.taker.Share*10)/10)
			n.handOver(c, sess)
		}
	}
}

// pick starts a look under the current session and picks the resources
// whose election lines it reads (PickReads); without a session, none.
func (n *Node) pick(now time.Time) (*Look, []handCand, Session) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.session == nil {
		return nil, nil, nil
	}
	look := NewLook(n.cfg.AgentID, n.seats(), n.cfg.Fresh)
	var cands []handCand
	for _, rs := range PickReads(look, n.electedRes(), func(rs *resState) *Seat { return &rs.Seat }, n.cfg.BalanceHold, now) {
		cands = append(cands, handCand{rs: rs, elec: rs.elec})
	}
	return look, cands, n.session
}

// electedRes are the resources whose election this agent holds a handle
// of (every one it leads). Called with n.mu held.
func (n *Node) electedRes() iter.Seq[*resState] {
	return func(yield func(*resState) bool) {
		for _, rs := range n.all {
			if rs.elec != nil && !yield(rs) {
				return
			}
		}
	}
}

// handed is a handover, for the log: to whom, the taker's load and the
// giver's before the move.
type handed struct {
	next  string
	taker Indicator
	leads int
	share float64
}

// decide takes the look's decision on c's line (Look.Decide), unless the
// leadership or the session it was read under has ended meanwhile, and
// reports a handover: the seat has stopped leading, and the caller
// resigns.
func (n *Node) decide(look *Look, c handCand, sess Session, line []Candidate) (handed, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := c.rs
	if !rs.Leading || rs.elec != c.elec || n.session != sess {
		return handed{}, false
	}
	h := handed{leads: look.Leads(), share: look.Share()}
	var newYield bool
	h.next, h.taker, newYield = look.Decide(&rs.Seat, line, n.cfg.Now())
	if h.next == "" {
		if newYield {
			n.cfg.Log.Debug("asking the next in line to step back for a less loaded agent", "resource", rs.name, "next", rs.Yield.ID)
		}
		return handed{}, false
	}
	// No record is queued after this (Decide stopped the leadership), and
	// one in flight is fenced by the key the resign deletes.
	rs.elec = nil
	if rs.unlead != nil {
		rs.unlead()
		rs.unlead = nil
	}
	return h, true
}

// handOver resigns c's election and campaigns again at once, behind the
// new leader.
func (n *Node) handOver(c handCand, sess Session) {
	rctx, cancel := n.rt.WithTimeout(n.ctx, time.Second)
	err := c.elec.Resign(rctx)
	cancel()
	if err != nil {
		// Our key may stand: campaigning again resumes it, and we lead.
		n.cfg.Log.Debug("resign failed; campaigning again", "resource", c.rs.name, "err", err)
	}
	n.mu.Lock()
	if n.session == sess && n.ctx.Err() == nil {
		n.startCampaign(c.rs) // behind the new leader
	}
	n.mu.Unlock()
}

// readLine reads res's election line, in order, if we are first in it
// (the key of e).
func (n *Node) readLine(res string, e Election) ([]Candidate, bool) {
	ctx, cancel := n.rt.WithTimeout(n.ctx, time.Second)
	defer cancel()
	kvs, _, err := n.kv.Get(ctx, ElectionKey(n.cfg.Prefix, res)+"/", Prefix|ByCreate)
	if err != nil || len(kvs) < 2 || kvs[0].CreateRevision != e.Rev() {
		return nil, false
	}
	line := make([]Candidate, len(kvs))
	for i, kv := range kvs {
		line[i] = Candidate{ID: string(kv.Value), Rev: kv.CreateRevision}
	}
	return line, true
}
