package sim

import (
	"fmt"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/control"
)

// sharedPID is cmd/sanqos's clusterRun.sharedPID: the agent's own PID
// for the resource, with the config in force.
func sharedPID(cfg *config.Config, res string) (control.Controller, error) {
	for _, r := range cfg.Resources {
		if r.Name == res {
			if p, ok := agent.NewPID(cfg, r).(control.Controller); ok {
				return p, nil
			}
			return nil, fmt.Errorf("resource %s: not a control.Controller", res)
		}
	}
	return nil, fmt.Errorf("resource %s is not in this agent's config", res)
}

// startAgent is the agent process starting: its Node grants a lease (the
// session), its policy watch reads the policy, and its resource loops
// start ticking.
func (s *clusterSim) startAgent(a *csAgent) {
	s.watchPolicy(a)
	s.write(&csReq{from: a, apply: func(rev int64, at time.Duration) {
		s.nextLease++
		a.lease = &csLease{id: s.nextLease, expiry: at + time.Duration(s.o.TTL)*time.Second, has: map[*csKV]bool{}}
		s.leases = append(s.leases, a.lease)
	}, done: func(ok bool) {
		if !ok || a.dead {
			return
		}
		s.sessionUp(a)
	}}, time.Second)
	s.tick(a)
	s.at(a.pubPhaseOff, func() { s.publisherTick(a) })
	if s.o.BalanceEvery > 0 {
		s.at(s.balancePace(), func() { s.balancer(a) })
	}
}

func (s *clusterSim) sessionUp(a *csAgent) {
	a.session = true
	if a.ticked {
		for _, sl := range a.slots {
			s.campaign(sl)
		}
	}
	for _, sl := range a.slots {
		if !sl.indTime.IsZero() {
			sl.dirty = true
		}
	}
	// clientv3 renews a lease every TTL/3.
	a.keepaliveEvery = time.Duration(s.o.TTL) * time.Second / 3
	s.at(a.keepaliveEvery, func() { s.keepalive(a) })
	s.publish(a)
}

func (s *clusterSim) keepalive(a *csAgent) {
	if a.dead {
		return
	}
	if s.inWindow() {
		s.keepalives++
	}
	l := a.lease
	d := s.oneWay()
	s.at(d, func() {
		if !s.down && !l.revoked {
			l.expiry = s.now + time.Duration(s.o.TTL)*time.Second
		}
	})
	s.at(a.keepaliveEvery, func() { s.keepalive(a) })
}

func (s *clusterSim) publisherTick(a *csAgent) {
	if a.dead {
		return
	}
	s.publish(a)
	s.at(s.o.PublishEvery, func() { s.publisherTick(a) })
}

// measure is what the agent's indicator reads on a resource: the back
// end's read wait — 2 ms, plus the writer's excess while it writes,
// removed in proportion to the step its agent applies to it (20 steps,
// 10 ms, tame it) — with 5 % noise per agent.
func (s *clusterSim) measure(sl *csSlot) float64 {
	r := sl.res
	w := 2.0
	if s.writerOn(r) {
		w += r.excessMs * max(0, 1-float64(r.writer.applied)/20)
	}
	return w * (1 + 0.05*s.rng.NormFloat64())
}

func (s *clusterSim) writerOn(r *csRes) bool {
	return s.now >= r.writerOn[0] && s.now < r.writerOn[1]
}

// tick is one control interval of an agent: each resource loop runs its
// local PID and goes through the seam (cluster.Controller: Publish, then
// Delay), as in the daemon.
func (s *clusterSim) tick(a *csAgent) {
	if a.dead {
		return
	}
	now := s.clock()
	first := !a.ticked
	a.ticked = true
	waits := make([]float64, len(a.slots))
	for i, sl := range a.slots {
		waits[i] = s.measure(sl)
	}
	t0 := time.Now()
	for i, sl := range a.slots {
		step := sl.local.Update(waits[i])
		// cluster.Details: the resource's traffic and the consumers with
		// any, the writer throttleable while it writes.
		ind := cluster.Indicator{Consumers: make([]cluster.Consumer, 0, len(sl.readers)+1)}
		for _, c := range sl.readers {
			ind.ReadBps += c.ReadBps
			ind.Consumers = append(ind.Consumers, c)
		}
		if sl.writer != nil && s.writerOn(sl.res) {
			ind.WriteBps += sl.writer.WriteBps
			ind.Consumers = append(ind.Consumers, *sl.writer)
		}
		ind.WaitMs, ind.LocalStep = waits[i], step
		// Node.Publish
		sl.Ind, sl.indTime, sl.dirty = ind, now, true
		// Node.Delay
		applied, _, led, _ := sl.Tick(a.id, step, s.t, control.DefaultStep, now,
			func() (control.Controller, error) { return sharedPID(a.cfg, sl.res.name) })
		if led.Rec != nil {
			a.kick = true // Node.led wakes the publisher
		}
		sl.applied, sl.localOut = applied, step
	}
	dt := time.Since(t0)
	if s.inWindow() {
		a.ticks++
		a.tickNs += int64(dt)
		a.tickUs = append(a.tickUs, float64(dt)/1e3)
	}
	if first {
		for _, sl := range a.slots {
			s.watchDelay(sl)
			if a.session {
				s.campaign(sl)
			}
		}
	}
	for k := range a.effect {
		s.policyInEffect(a, a.effect[k])
	}
	a.effect = a.effect[:0]
	s.afterTick(a)
	if a.kick {
		a.kick = false
		s.publish(a)
	}
	s.at(Interval, func() { s.tick(a) })
}

// afterTick is the model's bookkeeping of a tick (not the agent's work):
// propagation of records, cluster formation, failure measurements.
func (s *clusterSim) afterTick(a *csAgent) {
	for _, sl := range a.slots {
		inCl := sl.F.Mode == cluster.ModeCluster
		if inCl != sl.inCl {
			if inCl {
				s.inCluster++
			} else {
				s.inCluster--
				if s.inWindow() {
					s.spurious++
				}
			}
			sl.inCl = inCl
		}
		if inCl && sl.F.Shared.Seq > sl.counted {
			s.closeTracks(sl.res, func(tr *csTrack) {
				if tr.seq > sl.counted && tr.seq <= sl.F.Shared.Seq {
					tr.need--
					tr.max = max(tr.max, s.now-tr.made)
				}
			})
			sl.counted = sl.F.Shared.Seq
		}
		s.failureTick(sl)
	}
	if s.formedAt < 0 && s.inCluster == s.slotsTotal {
		s.formedAt = s.now
	}
}

// watchPolicy is Policies.Watch: read the policy, then watch it.
func (s *clusterSim) watchPolicy(a *csAgent) {
	s.read(a, func() func() {
		s.policyW = append(s.policyW, a)
		val, rev := s.policyKV.val, s.policyKV.mod
		return func() { s.applyPolicy(a, val, rev) }
	})
}

// applyPolicy is what the agent's policy watch does with a policy:
// Policies.Watch validates it, cmd/sanqos merges it over the agent's own
// config, and the node renews the shared controllers it leads.
func (s *clusterSim) applyPolicy(a *csAgent, doc []byte, rev int64) {
	if rev == a.appliedRev {
		return
	}
	a.appliedRev = rev
	t0 := time.Now()
	if _, err := cluster.ValidatePolicy(doc); err != nil {
		return
	}
	cfg, err := cluster.Merge(a.own, doc)
	if err != nil {
		return
	}
	a.cfg = cfg
	for _, sl := range a.slots {
		sl.Renew()
	}
	a.policyCPU = append(a.policyCPU, float64(time.Since(t0))/1e6)
	for k, r := range s.policyRev {
		if r == rev && k > 0 {
			a.appliedPolicy[k] = s.now
			a.effect = append(a.effect, k)
		}
	}
}

func (s *clusterSim) policyInEffect(a *csAgent, k int) {
	if _, ok := a.effectAt[k]; !ok {
		a.effectAt[k] = s.now
	}
}
