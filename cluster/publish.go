package cluster

import (
	"context"
	"time"
)

func (n *Node) wake() { n.kick.Wake() }

// publisher writes dirty indicators (under the lease) and leaders'
// records (each fenced by its election key, so a deposed leader cannot
// overwrite its successor), latest first: a write that fails is dropped,
// since the next tick brings newer data.
func (n *Node) publisher() {
	every := n.cfg.PublishEvery
	next := n.rt.Now().Add(every) // a ticker's: a kick does not move it
	for {
		n.rt.Sleep(n.ctx, next.Sub(n.rt.Now()), n.kick)
		if n.ctx.Err() != nil {
			return
		}
		now := n.rt.Now()
		for !next.After(now) {
			next = next.Add(every)
		}
		n.publishOnce(now)
	}
}

// write is one put of a publisher round: an indicator, or a leader's
// record with the election that fences it (its key and revision, read
// under n.mu: a handover resigns the election concurrently).
type write struct {
	res  string
	put  Put
	elec Election
	rec  *Shared
}

// publishOnce writes one round: every record the leader has queued and
// every indicator due, in one transaction of up to MaxTxnOps operations
// (more only past MaxTxnOps, the chunks sent at once), so a round costs
// one round trip and one commit however many resources the agent leads.
// Each record is its own nested transaction in the outer one's Then,
//
//	Txn().Then(OpTxn(If(CreateRevision(election key) = ours), Then(put record)), …, put indicator, …)
//
// and etcd evaluates each nested transaction's compare on its own: a
// record whose leadership was lost (its election key gone or re-created)
// is not written while the others are. A single flat transaction with
// every record's fence in its If would be all or nothing — one deposed
// resource would block every record of the round, and the Else branch
// cannot tell which fence failed — and one transaction per record (the
// old publisher) costs a round trip each, one after the other, which an
// agent leading 30 resources could not fit in a tick. Fencing is exactly
// as strong as before: each put still lands only while its own election
// key stands with our create revision.
func (n *Node) publishOnce(now time.Time) {
	n.mu.Lock()
	s := n.session
	if s == nil {
		n.mu.Unlock()
		return
	}
	var ws []write
	leads, share := Load(n.cfg.AgentID, n.seats())
	for _, rs := range n.all {
		if rs.Pending != nil && rs.elec != nil {
			b, _ := EncodeShared(rs.Pending)
			ws = append(ws, write{res: rs.name, rec: rs.Pending, elec: rs.elec,
				put: Put{Key: DelayKey(n.cfg.Prefix, rs.name), Value: string(b), FenceKey: rs.elec.Key(), FenceRev: rs.elec.Rev()}})
			rs.Pending = nil
		}
		if rs.dirty && now.Sub(rs.lastPub) >= n.cfg.PublishEvery {
			ind := rs.Ind
			ind.Leads, ind.Share = leads, share
			b, _ := EncodeIndicator(ind, rs.indTime)
			ws = append(ws, write{res: rs.name, put: Put{Key: AgentKey(n.cfg.Prefix, rs.name, n.cfg.AgentID), Value: string(b)}})
			rs.dirty, rs.lastPub = false, now
		}
	}
	n.mu.Unlock()
	lease := s.Lease()
	if len(ws) <= MaxTxnOps {
		n.commit(lease, ws)
		return
	}
	left := (len(ws) + MaxTxnOps - 1) / MaxTxnOps
	done := n.rt.NewWake()
	for len(ws) > 0 {
		k := min(len(ws), MaxTxnOps)
		chunk := ws[:k]
		ws = ws[k:]
		n.rt.Go(func() {
			n.commit(lease, chunk)
			n.mu.Lock()
			if left--; left == 0 {
				done.Wake()
			}
			n.mu.Unlock()
		})
	}
	for {
		n.mu.Lock()
		all := left == 0
		n.mu.Unlock()
		if all {
			return
		}
		n.rt.Sleep(context.Background(), Forever, done)
	}
}

// commit writes one chunk of a round (see publishOnce) and takes etcd's
// answer: a record that landed is confirmed to its leader's follower
// side (Follower.Confirm), indicators that did not are written again.
func (n *Node) commit(lease int64, ws []write) {
	puts := make([]Put, len(ws))
	for i, w := range ws {
		puts[i] = w.put
	}
	ctx, cancel := n.rt.WithTimeout(n.ctx, n.cfg.Fresh)
	ok, err := n.kv.Txn(ctx, lease, puts)
	cancel()
	if err != nil && n.ctx.Err() == nil {
		n.cfg.Log.Debug("publishing failed", "n", len(ws), "err", err)
	}
	at := n.cfg.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, w := range ws {
		rs := n.res[w.res]
		if rs == nil {
			continue
		}
		switch {
		case w.elec == nil:
			if err != nil {
				rs.dirty = true
			}
		case err != nil:
		case !ok[i]:
			n.cfg.Log.Debug("shared delay not written: this agent no longer holds the election key", "resource", w.res, "seq", w.rec.Seq)
		case rs.elec == w.elec:
			rs.F.Confirm(*w.rec, at)
		}
	}
}
