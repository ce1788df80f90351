package cluster

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// balancer hands resources to less loaded agents: one look (balance)
// every BalanceEvery, jittered by ±25 % so that leaders do not all look
// at once on the same stale loads.
func (n *Node) balancer() {
	t := time.NewTimer(n.cfg.BalanceEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.balance()
		d := n.cfg.BalanceEvery
		t.Reset(d*3/4 + rand.N(d/2+1))
	}
}

// handCand is a resource this leader may hand over.
type handCand struct {
	rs     *resState
	elec   *concurrency.Election
	looked time.Time
}

// handOverReads bounds the election reads (and so the handovers) of
// one look.
const handOverReads = 4

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
	now := n.cfg.Now()
	n.mu.Lock()
	sess := n.session
	if sess == nil {
		n.mu.Unlock()
		return
	}
	leads, share := n.load()
	var cands []handCand
	for _, rs := range n.res {
		if !rs.leading || rs.elec == nil || now.Sub(rs.since) < n.cfg.BalanceHold {
			continue
		}
		if AnyLighter(n.cfg.AgentID, leads, share, rs.agents, LiveLoads(rs.agents, rs.heard, nil, n.cfg.Fresh, now)) {
			cands = append(cands, handCand{rs: rs, elec: rs.elec, looked: rs.looked})
		} else {
			rs.yield = Candidate{}
		}
	}
	sort.Slice(cands, func(i, k int) bool { return cands[i].looked.Before(cands[k].looked) })
	cands = cands[:min(len(cands), handOverReads)]
	for _, c := range cands {
		c.rs.looked = now
	}
	n.mu.Unlock()
	given := map[string]int{} // this look's moves, by taker
	for _, c := range cands {
		line, ok := n.readLine(c.rs.name, c.elec)
		if !ok {
			continue
		}
		n.mu.Lock()
		rs := c.rs
		if !rs.leading || rs.elec != c.elec || n.session != sess {
			n.mu.Unlock()
			continue
		}
		next, yield := Balance(leads, share, line, LiveLoads(rs.agents, rs.heard, given, n.cfg.Fresh, n.cfg.Now()))
		if next == "" {
			if yield.ID != "" && yield != rs.yield {
				n.cfg.Log.Debug("asking the next in line to step back for a less loaded agent", "resource", rs.name, "next", yield.ID)
			}
			rs.yield = yield
			n.mu.Unlock()
			continue
		}
		ind := rs.agents[next]
		ind.Leads += given[next]
		// Stop leading before the resign: no record is queued after it,
		// and one in flight is fenced by the key the resign deletes.
		rs.leading, rs.elec, rs.pending, rs.yield = false, nil, nil, Candidate{}
		rs.lead.Drop()
		if rs.unlead != nil {
			rs.unlead()
			rs.unlead = nil
		}
		n.mu.Unlock()
		n.cfg.Log.Info("handing a resource over to a less loaded agent", "resource", rs.name, "to", next,
			"leads", leads, "share", math.Round(share*10)/10, "to_leads", ind.Leads, "to_share", math.Round(ind.Share*10)/10)
		rctx, cancel := context.WithTimeout(n.ctx, time.Second)
		err := c.elec.Resign(rctx)
		cancel()
		if err != nil {
			// Our key may stand: campaigning again resumes it, and we lead.
			n.cfg.Log.Debug("resign failed; campaigning again", "resource", rs.name, "err", err)
		}
		n.mu.Lock()
		if n.session == sess && n.ctx.Err() == nil {
			n.startCampaign(rs) // behind the new leader
		}
		n.mu.Unlock()
		leads--
		given[next]++
	}
}

// load is this agent's leadership load: how many resources it leads and
// its fair share of them. Called with n.mu held.
func (n *Node) load() (leads int, share float64) {
	for _, rs := range n.res {
		if rs.leading {
			leads++
		}
		share += ShareOf(Seen(rs.leading, n.cfg.AgentID, rs.agents, &rs.f))
	}
	return leads, share
}

// readLine reads res's election line, in order, if we are first in it
// (the key of e).
func (n *Node) readLine(res string, e *concurrency.Election) ([]Candidate, bool) {
	ctx, cancel := context.WithTimeout(n.ctx, time.Second)
	defer cancel()
	resp, err := n.cfg.Client.Get(ctx, ElectionKey(n.cfg.Prefix, res)+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) < 2 || resp.Kvs[0].CreateRevision != e.Rev() {
		return nil, false
	}
	line := make([]Candidate, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		line[i] = Candidate{ID: string(kv.Value), Rev: kv.CreateRevision}
	}
	return line, true
}
