package cluster

import (
	"context"
	"strings"
	"time"
)

// watch keeps rs's shared record in step with etcd (see follow). Only
// the shared record: every agent of a resource needs it, but only the
// leader needs the other agents' indicators (watchAgents), so a follower's
// watch traffic does not grow with the number of agents.
//
// A record found by the initial read is remembered but not counted as
// fresh: only one that arrives while we watch proves a live leader (a dead
// one's record outlives it by a TTL).
func (n *Node) watch(rs *resState) {
	n.follow(n.ctx, rs, DelayKey(n.cfg.Prefix, rs.name), false, nil, 0)
}

// watchAgents keeps a leader's view of every agent's indicator while its
// leadership (ctx) lasts, from revision from on (its initial read was done
// by the caller).
func (n *Node) watchAgents(ctx context.Context, rs *resState, from int64) {
	n.follow(ctx, rs, AgentsPrefix(n.cfg.Prefix, rs.name), true, func() { clear(rs.Agents); clear(rs.Heard) }, from)
}

// follow reads key (or the keys under it, with prefix) and watches it from
// the next revision until ctx ends; when a watch ends (etcd compacted past
// it, or lost its leader) it starts over with a fresh read. reset runs,
// under n.mu, before a fresh read is applied. With from > 0 the first read
// is skipped and the watch starts at from.
func (n *Node) follow(ctx context.Context, rs *resState, key string, prefix bool, reset func(), from int64) {
	var opt GetOpt
	if prefix {
		opt = Prefix
	}
	for ctx.Err() == nil {
		if from == 0 {
			gctx, cancel := n.rt.WithTimeout(ctx, time.Second)
			kvs, rev, err := n.kv.Get(gctx, key, opt)
			cancel()
			if err != nil {
				n.pause(ctx)
				continue
			}
			n.mu.Lock()
			if reset != nil {
				reset()
			}
			for _, kv := range kvs {
				n.apply(rs, kv.Key, kv.Value, false)
			}
			n.mu.Unlock()
			from = rev + 1
		}
		n.kv.Watch(ctx, key, prefix, from, func(evs []Event) {
			n.mu.Lock()
			defer n.mu.Unlock()
			for _, ev := range evs {
				if ev.Deleted {
					n.remove(rs, ev.Key)
				} else {
					n.apply(rs, ev.Key, ev.Value, true)
				}
			}
		})
		from = 0
	}
}

// apply takes one key's value into rs. Called with n.mu held.
func (n *Node) apply(rs *resState, key string, val []byte, live bool) {
	var now time.Time // a live value's arrival
	if live {
		now = n.cfg.Now()
	}
	switch {
	case key == DelayKey(n.cfg.Prefix, rs.name):
		rec, err := DecodeShared(val)
		if err != nil {
			n.cfg.Log.Warn("ignoring a malformed shared delay", "resource", rs.name, "err", err)
			return
		}
		if rs.Receive(rec, live, now, n.cfg.AgentID, rs.requeue != nil) {
			n.cfg.Log.Info("stepping back in the election line for a less loaded agent", "resource", rs.name, "leader", rec.Leader)
			rs.requeue()
		}
	case strings.HasPrefix(key, AgentsPrefix(n.cfg.Prefix, rs.name)):
		ind, err := DecodeIndicator(val)
		if err != nil {
			n.cfg.Log.Warn("ignoring a malformed indicator", "key", key, "err", err)
			return
		}
		rs.Hear(agentFromKey(n.cfg.Prefix, rs.name, key), ind, live, now)
	}
}

// remove forgets a deleted key (an agent's lease expired, a leader left).
func (n *Node) remove(rs *resState, key string) {
	if strings.HasPrefix(key, AgentsPrefix(n.cfg.Prefix, rs.name)) {
		rs.Forget(agentFromKey(n.cfg.Prefix, rs.name, key))
	}
}
