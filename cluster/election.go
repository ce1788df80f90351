package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/sanqos/sanqos/control"
)

// sessions keeps a lease with etcd: grant, keep alive, and when it ends
// (etcd unreachable for a TTL, or the lease revoked) grant a new one as
// soon as etcd answers again. Every campaign runs under the session.
func (n *Node) sessions() {
	var prev int64
	for n.ctx.Err() == nil {
		// Grant with our own timeout: the session's context would also
		// bound the keepalive.
		gctx, cancel := n.rt.WithTimeout(n.ctx, time.Second)
		lease, err := n.kv.Grant(gctx, int64(n.cfg.TTL))
		cancel()
		if err != nil {
			if n.ctx.Err() == nil {
				n.cfg.Log.Debug("etcd lease grant failed; retrying", "err", err)
				n.pause(n.ctx)
			}
			continue
		}
		if prev != 0 {
			// The lease we lost may still live in etcd (a restarted etcd
			// renews every lease): revoke it, so our old election key does
			// not keep the resources leaderless for another TTL.
			n.revoke(n.ctx, prev)
		}
		s, err := n.kv.Session(n.ctx, lease)
		if err != nil {
			continue
		}
		prev = lease
		sctx, scancel := n.rt.WithCancel(n.ctx)
		n.mu.Lock()
		n.session, n.sessionCtx = s, sctx
		for _, rs := range n.all {
			n.startCampaign(rs)
		}
		n.mu.Unlock()
		n.cfg.Log.Info("etcd session up", "agent", n.cfg.AgentID, "lease", fmt.Sprintf("%x", lease))
		n.markDirty()
		s.Wait(n.ctx)
		if n.ctx.Err() == nil {
			n.cfg.Log.Warn("etcd session lost; campaigning again when etcd answers", "agent", n.cfg.AgentID)
		}
		n.mu.Lock()
		n.session, n.sessionCtx = nil, nil
		scancel()
		for _, rs := range n.all {
			rs.Leading, rs.elec, rs.Pending, rs.unlead, rs.Yield, rs.requeue = false, nil, nil, nil, Candidate{}, nil
			rs.L.Drop()
			clear(rs.Agents)
			clear(rs.Heard)
		}
		n.mu.Unlock()
		if n.ctx.Err() != nil {
			// Leaving: revoke, so our keys go now rather than after a TTL.
			n.revoke(context.Background(), lease)
		}
	}
}

// revoke revokes lease, giving etcd a second.
func (n *Node) revoke(ctx context.Context, lease int64) {
	rctx, cancel := n.rt.WithTimeout(ctx, time.Second)
	n.kv.Revoke(rctx, lease)
	cancel()
}

// elected makes this agent rs's leader, with election e, a new
// controller, and unlead to end it. Called with n.mu held.
func (n *Node) elected(rs *resState, e Election, ctrl control.Controller, unlead context.CancelFunc) {
	rs.elec, rs.unlead, rs.requeue = e, unlead, nil
	rs.Elected(ctrl, n.cfg.Now())
}

// markDirty has every indicator rewritten under the (new) lease.
func (n *Node) markDirty() {
	n.mu.Lock()
	for _, rs := range n.all {
		if !rs.indTime.IsZero() {
			rs.dirty = true
		}
	}
	n.mu.Unlock()
	n.wake()
}

// startCampaign campaigns for rs's leadership under the current session.
// Called with n.mu held.
func (n *Node) startCampaign(rs *resState) {
	s, sctx := n.session, n.sessionCtx
	cctx, requeue := n.rt.WithCancel(sctx)
	rs.requeue = requeue
	n.goes(func() {
		// Campaign returns once every earlier candidate's key is gone:
		// then this agent leads until its session ends. A requeue (a
		// leader's yield) cancels it, and Campaign deletes our key on the
		// way out; only then may we campaign again, because the key's name
		// is the lease's: a new campaign before the delete would take the
		// old key, and its place, back.
		var e Election
		for {
			var err error
			e, err = s.Campaign(cctx, ElectionKey(n.cfg.Prefix, rs.name), n.cfg.AgentID)
			asked := cctx.Err() != nil
			requeue()
			if err == nil {
				break
			}
			n.mu.Lock()
			again := asked && sctx.Err() == nil && n.sessionCtx == sctx && !rs.Leading
			if again {
				cctx, requeue = n.rt.WithCancel(sctx)
				rs.requeue = requeue
			}
			n.mu.Unlock()
			if !again {
				return
			}
		}
		ctrl, err := n.cfg.NewController(rs.name)
		if err != nil {
			n.cfg.Log.Error("cannot build the shared controller; resigning", "resource", rs.name, "err", err)
			rctx, cancel := n.rt.WithTimeout(context.Background(), time.Second)
			e.Resign(rctx)
			cancel()
			return
		}
		// Read every agent's indicator before leading, so the controller
		// starts from the outputs in force (bumpless), then keep them.
		gctx, cancel := n.rt.WithTimeout(sctx, time.Second)
		kvs, rev, err := n.kv.Get(gctx, AgentsPrefix(n.cfg.Prefix, rs.name), Prefix)
		cancel()
		var from int64
		n.mu.Lock()
		if n.sessionCtx != sctx { // the session ended meanwhile
			n.mu.Unlock()
			return
		}
		clear(rs.Agents)
		clear(rs.Heard)
		if err == nil {
			for _, kv := range kvs {
				n.apply(rs, kv.Key, kv.Value, false)
			}
			from = rev + 1
		}
		lctx, unlead := n.rt.WithCancel(sctx)
		n.elected(rs, e, ctrl, unlead)
		n.mu.Unlock()
		n.watchAgents(lctx, rs, from)
		unlead()
	})
}
