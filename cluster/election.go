package cluster

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sanqos/sanqos/control"
)

// sessions keeps a lease with etcd: grant, keep alive, and when it ends
// (etcd unreachable for a TTL, or the lease revoked) grant a new one as
// soon as etcd answers again. Every campaign runs under the session.
func (n *Node) sessions() {
	var prev clientv3.LeaseID
	for n.ctx.Err() == nil {
		// Grant with our own timeout: NewSession's context would also bound
		// the keepalive.
		gctx, cancel := context.WithTimeout(n.ctx, time.Second)
		lease, err := n.cfg.Client.Grant(gctx, int64(n.cfg.TTL))
		cancel()
		if err != nil {
			if n.ctx.Err() == nil {
				n.cfg.Log.Debug("etcd lease grant failed; retrying", "err", err)
				pause(n.ctx, retryPace)
			}
			continue
		}
		if prev != 0 {
			// The lease we lost may still live in etcd (a restarted etcd
			// renews every lease): revoke it, so our old election key does
			// not keep the resources leaderless for another TTL.
			rctx, cancel := context.WithTimeout(n.ctx, time.Second)
			n.cfg.Client.Revoke(rctx, prev)
			cancel()
		}
		s, err := concurrency.NewSession(n.cfg.Client, concurrency.WithLease(lease.ID), concurrency.WithContext(n.ctx))
		if err != nil {
			continue
		}
		prev = lease.ID
		sctx, scancel := context.WithCancel(n.ctx)
		n.mu.Lock()
		n.session, n.sessionCtx = s, sctx
		for _, rs := range n.res {
			n.startCampaign(rs)
		}
		n.mu.Unlock()
		n.cfg.Log.Info("etcd session up", "agent", n.cfg.AgentID, "lease", fmt.Sprintf("%x", lease.ID))
		n.markDirty()
		select {
		case <-s.Done():
			n.cfg.Log.Warn("etcd session lost; campaigning again when etcd answers", "agent", n.cfg.AgentID)
		case <-n.ctx.Done():
		}
		n.mu.Lock()
		n.session, n.sessionCtx = nil, nil
		scancel()
		for _, rs := range n.res {
			rs.Leading, rs.elec, rs.Pending, rs.unlead, rs.Yield, rs.requeue = false, nil, nil, nil, Candidate{}, nil
			rs.L.Drop()
			clear(rs.Agents)
			clear(rs.Heard)
		}
		n.mu.Unlock()
		if n.ctx.Err() != nil {
			// Leaving: revoke, so our keys go now rather than after a TTL.
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n.cfg.Client.Revoke(rctx, lease.ID)
			cancel()
		}
	}
}

// elected makes this agent rs's leader, with election e, a new
// controller, and unlead to end it. Called with n.mu held.
func (n *Node) elected(rs *resState, e *concurrency.Election, ctrl control.Controller, unlead context.CancelFunc) {
	rs.elec, rs.unlead, rs.requeue = e, unlead, nil
	rs.Elected(ctrl, n.cfg.Now())
}

// markDirty has every indicator rewritten under the (new) lease.
func (n *Node) markDirty() {
	n.mu.Lock()
	for _, rs := range n.res {
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
	cctx, requeue := context.WithCancel(sctx)
	rs.requeue = requeue
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		e := concurrency.NewElection(s, ElectionKey(n.cfg.Prefix, rs.name))
		// Campaign returns once every earlier candidate's key is gone:
		// then this agent leads until its session ends. A requeue (a
		// leader's yield) cancels it, and Campaign deletes our key on the
		// way out; only then may we campaign again, because the key's name
		// is the lease's: a new campaign before the delete would take the
		// old key, and its place, back.
		for {
			err := e.Campaign(cctx, n.cfg.AgentID)
			asked := cctx.Err() != nil
			requeue()
			if err == nil {
				break
			}
			n.mu.Lock()
			again := asked && sctx.Err() == nil && n.sessionCtx == sctx && !rs.Leading
			if again {
				cctx, requeue = context.WithCancel(sctx)
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
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			e.Resign(rctx)
			cancel()
			return
		}
		// Read every agent's indicator before leading, so the controller
		// starts from the outputs in force (bumpless), then keep them.
		gctx, cancel := context.WithTimeout(sctx, time.Second)
		resp, err := n.cfg.Client.Get(gctx, AgentsPrefix(n.cfg.Prefix, rs.name), clientv3.WithPrefix())
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
			for _, kv := range resp.Kvs {
				n.apply(rs, string(kv.Key), kv.Value, false)
			}
			from = resp.Header.Revision + 1
		}
		lctx, unlead := context.WithCancel(sctx)
		n.elected(rs, e, ctrl, unlead)
		n.mu.Unlock()
		n.watchAgents(lctx, rs, from)
		unlead()
	}()
}
