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

// startAgent is the agent process starting: its Node (package cluster's,
// on the model's etcd and clock) keeps a session, publishes, watches and
// campaigns; its policy watch reads the policy, and its resource loops
// start ticking.
func (s *clusterSim) startAgent(a *csAgent) {
	o := s.o
	n, err := cluster.NewNode(cluster.Config{KV: simKV{s, a}, Runtime: simRT{s, a}, AgentID: a.id, Prefix: s.prefix,
		TTL: o.TTL, Fresh: o.Fresh, Decay: o.Decay, Blend: o.Blend, PublishEvery: o.PublishEvery,
		BalanceEvery: o.BalanceEvery, BalanceHold: o.BalanceHold, Step: control.DefaultStep,
		NewController: func(res string) (control.Controller, error) { return sharedPID(a.cfg, res) }})
	if err != nil {
		panic(err) // the options were checked: a bug
	}
	a.node = n
	s.watchPolicy(a)
	s.at(a.tickOff, func() { s.tick(a) })
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
		a.node.Publish(sl.res.name, ind, now)
		sl.applied, _ = a.node.Delay(sl.res.name, step, now)
		sl.localOut = step
	}
	dt := time.Since(t0)
	if s.inWindow() {
		a.ticks++
		a.tickNs += int64(dt)
		a.tickUs = append(a.tickUs, float64(dt)/1e3)
	}
	// The node's resources are the agent's slots, both in name order.
	for i, st := range a.node.Status(now) {
		a.slots[i].st = st
	}
	for k := range a.effect {
		s.policyInEffect(a, a.effect[k])
	}
	a.effect = a.effect[:0]
	s.afterTick(a)
	s.at(Interval, func() { s.tick(a) })
}

// afterTick is the model's bookkeeping of a tick (not the agent's work):
// propagation of records, cluster formation, failure measurements.
func (s *clusterSim) afterTick(a *csAgent) {
	for _, sl := range a.slots {
		inCl := sl.st.Mode == cluster.ModeCluster
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
		if seq := sl.st.Seq; inCl && seq > sl.counted {
			s.closeTracks(sl.res, func(tr *csTrack) {
				if tr.seq > sl.counted && tr.seq <= seq {
					tr.need--
					tr.max = max(tr.max, s.now-tr.made)
				}
			})
			sl.counted = seq
		}
		s.failureTick(sl)
	}
	if s.formedAt < 0 && s.inCluster == s.slotsTotal {
		s.formedAt = s.now
	}
}

// watchPolicy is Policies.Watch: read the policy, then watch it.
func (s *clusterSim) watchPolicy(a *csAgent) {
	w := &csWatcher{a: a, key: s.policyKey}
	w.on = func() {
		for _, h := range w.got {
			s.applyPolicy(a, h.ev.Value, h.rev)
		}
		w.got = nil
	}
	s.read(a, func() func() {
		s.watch[w.key] = append(s.watch[w.key], w)
		kv := s.kv[s.policyKey]
		val, rev := kv.val, kv.mod
		return func() { s.applyPolicy(a, []byte(val), rev) }
	})
}

// trackRecord starts following a record once etcd has it. An agent
// that applied it already (its leader, at the tick that made it: Own)
// counts at once.
func (s *clusterSim) trackRecord(r *csRes, rec cluster.Shared) {
	if !s.inWindow() {
		return
	}
	n := 0
	for _, sl := range r.slots {
		if !sl.a.dead && !(sl.inCl && sl.counted >= rec.Seq) {
			n++
		}
	}
	if n == 0 {
		s.recordsDone++
		s.sharedProp = append(s.sharedProp, 0)
		return
	}
	r.tracks = append(r.tracks, &csTrack{seq: rec.Seq, made: rec.Time.Sub(s.epoch), need: n})
}

// closeTracks runs count on each of r's open records (it takes off need
// an agent that has applied the record, or never will), then closes those
// no agent still needs: propagated in the time the last one took.
func (s *clusterSim) closeTracks(r *csRes, count func(*csTrack)) {
	kept := r.tracks[:0]
	for _, tr := range r.tracks {
		count(tr)
		if tr.need <= 0 {
			s.recordsDone++
			s.sharedProp = append(s.sharedProp, ms(tr.max))
			continue
		}
		kept = append(kept, tr)
	}
	r.tracks = kept
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
	a.node.Renew()
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
