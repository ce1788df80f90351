package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/sanqos/sanqos/cluster"
)

// balancePace is the balancer's jittered period (±25 %).
func (s *clusterSim) balancePace() time.Duration {
	d := s.o.BalanceEvery
	return d*3/4 + time.Duration(s.rng.Int64N(int64(d/2)+1))
}

func (s *clusterSim) balancer(a *csAgent) {
	if a.dead {
		return
	}
	s.balance(a)
	s.at(s.balancePace(), func() { s.balancer(a) })
}

// balance is Node.balance on the modelled etcd, with its rules
// (cluster.NewLook, PickReads, Look.Decide): the resources it picks are
// read one after the other, and on each line the look hands the resource
// over or asks the next in line to step back.
func (s *clusterSim) balance(a *csAgent) {
	if !a.session {
		return
	}
	look := cluster.NewLook(a.id, a.seats(), s.o.Fresh)
	cands := cluster.PickReads(look, slices.Values(a.slots), func(sl *csSlot) *cluster.Seat { return &sl.Seat }, s.o.BalanceHold, s.clock())
	var try func(k int)
	try = func(k int) {
		if k >= len(cands) || a.dead {
			return
		}
		sl := cands[k]
		elec := sl.elec
		s.read(a, func() func() {
			r := sl.res
			if len(r.cands) < 2 || r.cands[0] != sl || r.cands[0].elec != elec {
				return func() { try(k + 1) }
			}
			line := make([]cluster.Candidate, len(r.cands))
			for i, c := range r.cands {
				line[i] = cluster.Candidate{ID: c.a.id, Rev: c.elec.create}
			}
			return func() {
				if !sl.Leading || sl.elec != elec {
					try(k + 1)
					return
				}
				if next, _, _ := look.Decide(&sl.Seat, line, s.clock()); next == "" {
					try(k + 1)
					return
				}
				s.handOver(sl, func() { try(k + 1) })
			}
		})
	}
	try(0)
}

// handOver is the rest of Node.balance once Look.Decide has ended the
// leadership: stop watching the indicators, resign (delete the election
// key if it is still ours) and campaign again, behind the new leader.
func (s *clusterSim) handOver(sl *csSlot, then func()) {
	a, r := sl.a, sl.res
	for i, w := range r.agentWatch {
		if w == sl {
			r.agentWatch = append(r.agentWatch[:i], r.agentWatch[i+1:]...)
			break
		}
	}
	if s.now < s.o.KillAt || s.o.KillAt == 0 {
		s.handovers++
		s.lastHandover = s.now
		if s.inWindow() {
			s.handoversWin++
		}
	}
	kv := sl.elec
	s.write(&csReq{from: a, apply: func(_ int64, at time.Duration) {
		if s.kv[kv.key] == kv {
			s.del(kv, at)
		}
	}, done: func(ok bool) {
		if ok && !a.dead && a.session {
			s.campaign(sl)
		}
		then()
	}}, time.Second)
}

// campaign is Node.startCampaign's concurrency.Election.Campaign: put
// the candidate's key (under the lease) if absent, then wait until every
// key created before it is gone.
func (s *clusterSim) campaign(sl *csSlot) {
	a, r := sl.a, sl.res
	key := cluster.ElectionKey(s.prefix, r.name) + "/" + fmt.Sprintf("%x", a.lease.id)
	sl.campGen++
	sl.campaigning = true
	gen := sl.campGen
	s.write(&csReq{from: a, lease: a.lease, absent: true,
		puts: []csPut{{key: key, val: []byte(a.id), kind: kindElection, res: r, cand: sl}},
		apply: func(int64, time.Duration) {
			sl.elec = s.kv[key]
			r.cands = append(r.cands, sl)
		}, done: func(ok bool) {
			if ok && !a.dead {
				s.waitDeletes(sl, gen)
			}
		}}, 0)
}

// requeue is a campaign cancelled by a leader's yield (Node.startCampaign):
// Campaign deletes our key on the way out, then we campaign again, from
// the back of the line.
func (s *clusterSim) requeue(sl *csSlot) {
	a, kv := sl.a, sl.elec
	sl.campGen++ // the waits of the cancelled campaign are void
	sl.campaigning = false
	s.write(&csReq{from: a, apply: func(_ int64, at time.Duration) {
		if kv != nil && s.kv[kv.key] == kv {
			s.del(kv, at)
		}
	}, done: func(bool) {
		if !a.dead && a.session {
			s.campaign(sl)
		}
	}}, time.Second)
}

// waitDeletes is concurrency's waitDeletes: read the newest key created
// before ours; none → leading; else watch its deletion and look again.
// A wait of campaign gen ends once the slot has campaigned again.
func (s *clusterSim) waitDeletes(sl *csSlot, gen int) {
	r := sl.res
	s.read(sl.a, func() func() {
		if sl.campGen != gen {
			return nil
		}
		var pred *csSlot
		for _, c := range r.cands {
			if c == sl {
				break
			}
			pred = c
		}
		if pred == nil {
			return func() {
				if sl.campGen == gen {
					sl.campaigning = false
					s.elected(sl)
				}
			}
		}
		pred.elec.delWatchers = append(pred.elec.delWatchers, csWaiter{sl, gen})
		return nil
	})
}

// elected is the rest of startCampaign: build the controller, read every
// agent's indicator, lead, watch the indicators.
func (s *clusterSim) elected(sl *csSlot) {
	a, r := sl.a, sl.res
	ctrl, err := sharedPID(a.cfg, r.name)
	if err != nil {
		return
	}
	s.read(a, func() func() {
		r.agentWatch = append(r.agentWatch, sl)
		var vals [][]byte
		var ids []string
		for _, o := range r.slots {
			if kv := s.kv[cluster.AgentKey(s.prefix, r.name, o.a.id)]; kv != nil {
				vals, ids = append(vals, kv.val), append(ids, o.a.id)
			}
		}
		return func() {
			t0 := time.Now()
			clear(sl.Agents)
			clear(sl.Heard)
			for i, v := range vals {
				if ind, err := cluster.DecodeIndicator(v); err == nil {
					sl.Agents[ids[i]] = ind
				}
			}
			sl.Elected(ctrl, s.clock())
			s.recvTime(a, t0)
		}
	})
}
