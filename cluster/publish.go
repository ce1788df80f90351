package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func (n *Node) wake() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// publisher writes dirty indicators (under the lease) and leaders'
// records (each fenced by its election key, so a deposed leader cannot
// overwrite its successor), latest first: a write that fails is dropped,
// since the next tick brings newer data.
func (n *Node) publisher() {
	t := time.NewTicker(n.cfg.PublishEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.kick:
		case <-t.C:
		}
		n.publishOnce(time.Now())
	}
}

// write is one put of a publisher round: an indicator, or a leader's
// record with the election that fences it (its key and revision, read
// under n.mu: a handover resigns the election concurrently).
type write struct {
	res     string
	key     string
	val     string
	elec    *concurrency.Election
	elecKey string
	elecRev int64
	rec     *Shared
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
	for _, rs := range n.res {
		if rs.Pending != nil && rs.elec != nil {
			b, _ := EncodeShared(rs.Pending)
			ws = append(ws, write{res: rs.name, key: DelayKey(n.cfg.Prefix, rs.name), val: string(b), rec: rs.Pending,
				elec: rs.elec, elecKey: rs.elec.Key(), elecRev: rs.elec.Rev()})
			rs.Pending = nil
		}
		if rs.dirty && now.Sub(rs.lastPub) >= n.cfg.PublishEvery {
			ind := rs.Ind
			ind.Leads, ind.Share = leads, share
			b, _ := EncodeIndicator(ind, rs.indTime)
			ws = append(ws, write{res: rs.name, key: AgentKey(n.cfg.Prefix, rs.name, n.cfg.AgentID), val: string(b)})
			rs.dirty, rs.lastPub = false, now
		}
	}
	n.mu.Unlock()
	lease := s.Lease()
	var wg sync.WaitGroup
	for len(ws) > 0 {
		k := min(len(ws), MaxTxnOps)
		chunk := ws[:k]
		ws = ws[k:]
		wg.Add(1)
		go func() { defer wg.Done(); n.commit(lease, chunk) }()
	}
	wg.Wait()
}

// commit writes one chunk of a round (see publishOnce) and takes etcd's
// answer: a record that landed is confirmed to its leader's follower
// side (Follower.Confirm), indicators that did not are written again.
func (n *Node) commit(lease clientv3.LeaseID, ws []write) {
	ops := make([]clientv3.Op, len(ws))
	for i, w := range ws {
		put := clientv3.OpPut(w.key, w.val, clientv3.WithLease(lease))
		if w.elec == nil {
			ops[i] = put
			continue
		}
		fence := clientv3.Compare(clientv3.CreateRevision(w.elecKey), "=", w.elecRev)
		ops[i] = clientv3.OpTxn([]clientv3.Cmp{fence}, []clientv3.Op{put}, nil)
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Fresh)
	resp, err := n.cfg.Client.Txn(ctx).Then(ops...).Commit()
	cancel()
	if err == nil && len(resp.Responses) != len(ws) {
		err = fmt.Errorf("etcd answered %d operations of %d", len(resp.Responses), len(ws))
	}
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
		case !resp.Responses[i].GetResponseTxn().GetSucceeded():
			n.cfg.Log.Debug("shared delay not written: this agent no longer holds the election key", "resource", w.res, "seq", w.rec.Seq)
		case rs.elec == w.elec:
			rs.F.Confirm(*w.rec, at)
		}
	}
}
