package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
)

// newClusterSim lays out the SAN: the agents, the resources behind them
// with their consumers, the agents' own configs and the policy changes. The
// random draws happen in this order, so a seed gives the same SAN.
func newClusterSim(o ClusterScaleOptions) (*clusterSim, error) {
	if o.Agents < o.Spread || o.Spread < 1 || o.Resources < 1 || o.Consumers < o.Resources {
		return nil, fmt.Errorf("cluster-scale: want spread ≥ 1, agents ≥ spread, consumers ≥ resources ≥ 1 (have %d agents, spread %d, %d resources, %d consumers)",
			o.Agents, o.Spread, o.Resources, o.Consumers)
	}
	s := &clusterSim{o: o, rng: rand.New(rand.NewPCG(o.Seed, 22)), epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		prefix: cluster.DefaultPrefix, kv: map[string]*csKV{}, lines: map[string][]*csKV{}, watch: map[string][]*csWatcher{},
		watchPrefix: map[string][]*csWatcher{}, leases: map[int64]*csLease{}, resOf: map[string]*csRes{},
		nextLease: 0x694d7a1c2b3e0000, formedAt: -1, back: make(chan struct{})}
	s.policyKey = cluster.PolicyKey(s.prefix)
	s.addAgents()
	s.addResources()
	if err := s.configureAgents(); err != nil {
		return nil, err
	}
	if err := s.makePolicies(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *clusterSim) addAgents() {
	for i := range s.o.Agents {
		a := &csAgent{idx: i, id: fmt.Sprintf("host%03d", i), appliedPolicy: map[int]time.Duration{}, effectAt: map[int]time.Duration{}}
		// Agents start within half a second of each other, at no
		// common phase: their ticks and publishers are not aligned.
		a.start = time.Duration(s.rng.Int64N(int64(500 * time.Millisecond)))
		// Its resource loops start tickOff after its node: the node's
		// publisher ticks at no common phase with them.
		a.tickOff = time.Duration(s.rng.Int64N(int64(s.o.PublishEvery)))
		s.agents = append(s.agents, a)
	}
}

// addResources: resource r is behind agents r, r+stride, r+2·stride, …
// (mod the agents), stride spreading each resource's agents over the
// fleet; its consumers are dealt round-robin among them, the last one
// being the resource's writer.
func (s *clusterSim) addResources() {
	o := s.o
	stride := max(1, o.Agents/o.Spread)
	per, extra := o.Consumers/o.Resources, o.Consumers%o.Resources
	ci := 0
	for r := range o.Resources {
		res := &csRes{idx: r, name: fmt.Sprintf("r%04d", r), excessMs: 20 + 20*s.rng.Float64()}
		res.writerOn = s.writerTimes(r)
		s.placeSlots(res, stride)
		n := per
		if r < extra {
			n++
		}
		ci = dealConsumers(res, n, ci)
		s.res = append(s.res, res)
		s.resOf[cluster.DelayKey(s.prefix, res.name)] = res
		s.slotsTotal += len(res.slots)
	}
}

// writerTimes: the writer starts in the first half of the run; on odd
// resources it stops 5-15 s later, so shared steps rise, hold and fall,
// and on even ones it writes to the end, so a lost cluster leaves shared
// steps to decay.
func (s *clusterSim) writerTimes(r int) [2]time.Duration {
	on := time.Duration(s.rng.Int64N(int64(s.o.Length/2))) + time.Second
	off := on + 5*time.Second + time.Duration(s.rng.Int64N(int64(10*time.Second)))
	if r%2 == 0 {
		off = s.o.Length + time.Second
	}
	return [2]time.Duration{on, off}
}

// placeSlots puts res behind Spread distinct agents from its own on, by
// stride.
func (s *clusterSim) placeSlots(res *csRes, stride int) {
	seen := map[int]bool{}
	for k := range s.o.Spread {
		ai := (res.idx + k*stride) % s.o.Agents
		for seen[ai] {
			ai = (ai + 1) % s.o.Agents
		}
		seen[ai] = true
		a := s.agents[ai]
		sl := &csSlot{a: a, res: res}
		a.slots = append(a.slots, sl)
		res.slots = append(res.slots, sl)
	}
}

// dealConsumers deals res's n consumers, numbered from ci on, among its
// slots; it returns the next number.
func dealConsumers(res *csRes, n, ci int) int {
	for c := range n {
		sl := res.slots[c%len(res.slots)]
		addr := scaleAddr(ci)
		ci++
		if c == n-1 {
			sl.writer = &cluster.Consumer{Addr: addr, Throttleable: true, WriteBps: 8e6}
			res.writer = sl
			continue
		}
		sl.readers = append(sl.readers, cluster.Consumer{Addr: addr, ReadBps: 64 << 10})
	}
	return ci
}

// configureAgents: each agent's own config names the resources it serves
// (the policy sets their thresholds: see makePolicies).
func (s *clusterSim) configureAgents() error {
	for _, a := range s.agents {
		sort.Slice(a.slots, func(i, k int) bool { return a.slots[i].res.idx < a.slots[k].res.idx })
		var b strings.Builder
		b.WriteString("backend: dry-run\ndiscovery:\n  source: tgt\nresources:\n")
		for _, sl := range a.slots {
			fmt.Fprintf(&b, "  - name: %s\n", sl.res.name)
		}
		a.own = []byte(b.String())
		cfg, err := config.Parse(a.own)
		if err != nil {
			return err
		}
		a.cfg = cfg
		for _, sl := range a.slots {
			ctrl, err := sharedPID(cfg, sl.res.name)
			if err != nil {
				return err
			}
			sl.local = ctrl
		}
	}
	return nil
}

// makePolicies writes the initial policy and each change: the thresholds
// of every resource (the whole SAN's), 1 ms higher in odd changes, so that
// each change is a new policy.
func (s *clusterSim) makePolicies() error {
	for k := 0; k <= s.o.Policies; k++ {
		var b strings.Builder
		th := s.o.Threshold + time.Duration(k%2)*time.Millisecond
		fmt.Fprintf(&b, "threshold: %v\nresources:\n", th)
		for _, r := range s.res {
			fmt.Fprintf(&b, "  - name: %s\n    threshold: %v\n", r.name, th)
		}
		doc := []byte(b.String())
		if _, err := cluster.ValidatePolicy(doc); err != nil {
			return err
		}
		s.policyDocs = append(s.policyDocs, doc)
	}
	return nil
}

func (s *clusterSim) run() {
	// The initial policy is in etcd before any agent starts.
	s.rev++
	s.kv[s.policyKey] = &csKV{key: s.policyKey, val: string(s.policyDocs[0]), create: s.rev, mod: s.rev, kind: kindPolicy}
	s.policyRev = append(s.policyRev, s.rev)
	s.policyPut = append(s.policyPut, 0)
	for _, a := range s.agents {
		s.at(a.start, func() { s.startAgent(a) })
	}
	s.at(s.o.Etcd.LeaseCheck, s.leaseCheck)
	for k := 1; k <= s.o.Policies; k++ {
		s.at(s.o.PolicyFrom+time.Duration(k-1)*s.o.PolicyEvery, func() { s.putPolicy(k) })
	}
	s.at(s.o.Warmup+s.window(), s.snapshot)
	if s.o.KillAt > 0 {
		s.at(s.o.KillAt, s.kill)
	}
	if s.o.OutageAt > 0 {
		s.at(s.o.OutageAt, s.outage)
	}
	for at, ok := s.q.next(); ok && at <= s.o.Length; at, ok = s.q.next() {
		_, fn := s.q.pop()
		s.now = at
		s.events0++
		fn()
		s.drain()
	}
	s.end()
}

// putPolicy is an operator's Policies.Put of change k.
func (s *clusterSim) putPolicy(k int) {
	doc := s.policyDocs[k]
	if _, err := cluster.ValidatePolicy(doc); err != nil {
		return
	}
	s.policyPut = append(s.policyPut, s.now)
	s.write(&csReq{puts: []cluster.Put{{Key: s.policyKey, Value: string(doc)}}, apply: func(time.Duration) {
		s.policyRev = append(s.policyRev, s.rev)
	}})
}

// snapshot takes the steady state's sizes at the end of the rate window.
func (s *clusterSim) snapshot() {
	s.keysAtEnd, s.leasesAtEnd = len(s.kv), len(s.leaseList)
	for _, l := range s.leaseList {
		if l.revoked {
			s.leasesAtEnd--
		}
	}
	led := s.led()
	for _, r := range s.res {
		leader := false
		for _, sl := range r.slots {
			leader = leader || sl.st.Leading && !sl.a.dead
		}
		if !leader {
			s.leaderlessAtKill++
		}
	}
	for _, a := range s.agents {
		if !a.dead {
			s.ledAtKill = append(s.ledAtKill, float64(led[a.idx]))
		}
	}
}

func (s *clusterSim) led() []int {
	led := make([]int, len(s.agents))
	for _, r := range s.res {
		for _, sl := range r.slots {
			if sl.st.Leading && !sl.a.dead {
				led[sl.a.idx]++
			}
		}
	}
	return led
}

// kill: the agent leading the most resources dies without a goodbye.
func (s *clusterSim) kill() {
	led := s.led()
	var victim *csAgent
	for _, a := range s.agents {
		if !a.dead && (victim == nil || led[a.idx] > led[victim.idx]) {
			victim = a
		}
	}
	if victim == nil {
		return
	}
	s.killed, s.killedLed = victim, led[victim.idx]
	for _, sl := range victim.slots {
		if !sl.st.Leading {
			continue
		}
		for _, o := range sl.res.slots {
			if o.a != victim {
				o.deathMode = csFailure{watch: true, fellAt: -1, rejoinAt: -1, decayedAt: -1}
			}
		}
	}
	victim.dead = true
	for _, sl := range victim.slots {
		// The dead agent applies nothing more: its records count as
		// propagated once the living have them.
		s.closeTracks(sl.res, func(tr *csTrack) {
			if tr.seq > sl.counted {
				tr.need--
			}
		})
	}
}

// outage: etcd stops answering; requests in flight are lost.
func (s *clusterSim) outage() {
	s.down = true
	for _, a := range s.agents {
		if a.dead {
			continue
		}
		for _, sl := range a.slots {
			if sl.st.Mode == cluster.ModeCluster {
				sl.outageMode = csFailure{watch: true, fellAt: -1, rejoinAt: -1, decayedAt: -1}
			}
		}
	}
}

func (s *clusterSim) failureTick(sl *csSlot) {
	if m := &sl.deathMode; m.watch {
		if m.fellAt < 0 && sl.st.Mode != cluster.ModeCluster {
			m.fellAt, m.lastRecAt = s.now, s.now-sl.st.Age
		}
		if m.fellAt >= 0 && m.rejoinAt < 0 && sl.st.Mode == cluster.ModeCluster && sl.st.Leader != s.killed.id {
			m.rejoinAt = s.now
		}
	}
	if m := &sl.outageMode; m.watch {
		if m.fellAt < 0 && sl.st.Mode != cluster.ModeCluster {
			m.fellAt, m.lastRecAt, m.residue = s.now, s.now-sl.st.Age, float64(sl.st.Step)
		}
		if m.fellAt >= 0 && m.decayedAt < 0 && sl.st.Mode == cluster.ModeLocal {
			m.decayedAt = s.now
			m.aboveLoc = sl.applied != sl.localOut
		}
	}
}
