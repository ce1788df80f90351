package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sanqos/sanqos/control"
)

// DefaultPrefix is where sanqos keeps its keys; v1 is the layout's version.
const DefaultPrefix = "/sanqos/v1"

// Config configures a Node.
type Config struct {
	Client *clientv3.Client
	// Prefix of every key (default DefaultPrefix).
	Prefix string
	// AgentID names this agent (default: the hostname, set by the caller).
	AgentID string
	// TTL of the agent's lease, in seconds (default 2): how long a dead
	// agent's indicators and a dead leader's delay outlive it, and how long
	// a new leader waits for the old one's election key to go.
	TTL int
	// Fresh is how old (since it was received) a shared step may be and
	// still be followed (default 500 ms). The leader republishes at least
	// three times per Fresh, so an agent falls back within Fresh of the
	// last record it got: under 1 s after etcd or the leader is lost.
	Fresh time.Duration
	// Decay bounds how long a lost shared step outlives its source: it
	// falls linearly to zero over Decay (default 4 s), so no consumer
	// stays throttled by a cluster that is gone. It should outlast a leader
	// failover (measured 2.0–3.5 s with TTL 2 s: the lease's expiry, etcd's
	// 0.5 s expiry scan, the new leader's first record), or a consumer that
	// only the shared step throttles is let go while leaders change.
	Decay time.Duration
	// Blend is how long the move from the local step to the shared one
	// takes when an agent (re)joins (default 1 s): no jump on rejoin.
	Blend time.Duration
	// PublishEvery bounds how often an indicator is written (default
	// 100 ms, the agent's interval). Every write costs a Raft round.
	PublishEvery time.Duration
	// NewController builds the shared controller of a resource this agent
	// comes to lead: package control's PID with the resource's gains.
	NewController func(resource string) (control.Controller, error)
	// Step is the delay of one step (for the published record).
	Step time.Duration
	// BalanceEvery is how often a leader looks for a resource to hand
	// to a less loaded agent (default DefaultBalanceEvery; negative: never,
	// the first agent to campaign keeps what it wins). BalanceHold is how
	// long it keeps a resource it won before handing it on (default
	// DefaultBalanceHold). See HandOver and Node.balance.
	BalanceEvery time.Duration
	BalanceHold  time.Duration
	// Now is the clock that stamps received records (default time.Now);
	// it must be the clock of the now passed to Delay.
	Now func() time.Time
	Log *slog.Logger
}

func (c *Config) defaults() error {
	if c.Client == nil {
		return errors.New("cluster: no etcd client")
	}
	if c.AgentID == "" || strings.ContainsAny(c.AgentID, "/ \t\n") {
		return fmt.Errorf("cluster: agent id %q: want a non-empty name without slashes or spaces", c.AgentID)
	}
	if c.NewController == nil {
		return errors.New("cluster: no NewController")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Prefix = strings.TrimRight(c.Prefix, "/")
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.Fresh <= 0 {
		c.Fresh = DefaultFresh
	}
	if c.Decay <= 0 {
		c.Decay = DefaultDecay
	}
	if c.Blend <= 0 {
		c.Blend = DefaultBlend
	}
	if c.PublishEvery <= 0 {
		c.PublishEvery = DefaultPublishEvery
	}
	if c.Step <= 0 {
		c.Step = control.DefaultStep
	}
	if c.BalanceEvery == 0 {
		c.BalanceEvery = DefaultBalanceEvery
	}
	if c.BalanceHold <= 0 {
		c.BalanceHold = DefaultBalanceHold
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

func (c *Config) timing() Timing { return Timing{Fresh: c.Fresh, Decay: c.Decay, Blend: c.Blend} }

// Node is one agent's membership in the cluster. Its methods never block
// on etcd: Publish and Delay work on memory that background goroutines
// keep in step with etcd, so an unreachable etcd slows no control tick.
type Node struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	res     map[string]*resState
	session *concurrency.Session
	// sessionCtx ends with the session: campaigns run under it.
	sessionCtx context.Context
	kick       chan struct{} // wakes the publisher
}

// resState is one resource on this agent. Guarded by Node.mu.
type resState struct {
	name string
	// Local side: the last indicator and whether it is written yet.
	ind     Indicator
	indTime time.Time
	dirty   bool
	lastPub time.Time
	// Follower side: the last shared record, when it came (our clock),
	// what this agent applied and the transition it is in.
	f Follower
	// Leader side.
	leading bool
	elec    *concurrency.Election
	lead    Leader
	pending *Shared              // record to write
	agents  map[string]Indicator // every agent's indicator, from the watch
	// heard is when each agent's indicator last came live (our clock):
	// only an agent heard within Fresh is handed a resource.
	heard map[string]time.Time
	// since is when this leadership began; unlead ends it (its watch of
	// the indicators), for a handover.
	since  time.Time
	unlead context.CancelFunc
	// looked is when the balancer last read this resource's election;
	// yield is the candidate its records ask to step back (Balance).
	looked time.Time
	yield  Candidate
	// Candidate side: requeue ends the campaign in progress, which then
	// campaigns again from the back of the line; yielded is the key
	// revision of the last yield asked of us, so a request acts once.
	requeue context.CancelFunc
	yielded int64
}

// NewNode joins the cluster: it keeps a session (lease) with etcd, and
// for each resource it is told about publishes, watches and campaigns.
// Close leaves.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, ctx: ctx, cancel: cancel, res: map[string]*resState{}, kick: make(chan struct{}, 1)}
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.sessions() }()
	go func() { defer n.wg.Done(); n.publisher() }()
	if cfg.BalanceEvery > 0 {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.balancer() }()
	}
	return n, nil
}

// Close stops everything and revokes the lease, so this agent's
// indicators and any delay it published as leader go at once.
func (n *Node) Close() {
	n.cancel()
	n.wg.Wait()
}

// ID is the agent's id.
func (n *Node) ID() string { return n.cfg.AgentID }

// state returns the resource's state, starting its watch (and campaign,
// when there is a session) the first time. Called with n.mu held.
func (n *Node) state(res string) *resState {
	rs := n.res[res]
	if rs != nil {
		return rs
	}
	rs = &resState{name: res, f: Follower{Mode: ModeLocal}, agents: map[string]Indicator{}, heard: map[string]time.Time{}}
	n.res[res] = rs
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.watch(rs) }()
	if n.session != nil {
		n.startCampaign(rs)
	}
	return rs
}

// Publish implements Seam: the indicator is written (under the lease)
// by the publisher, at most every PublishEvery.
func (n *Node) Publish(res string, ind Indicator, now time.Time) {
	n.mu.Lock()
	rs := n.state(res)
	rs.ind, rs.indTime, rs.dirty = ind, now, true
	n.mu.Unlock()
}

// Delay implements Seam. On the leader it first runs the shared
// controller one tick. Then every agent, leader included, follows the
// shared step while the last record it received is fresh; without one it
// applies max(local, what is left of the lost shared step), and that
// residue decays linearly to zero over Decay. Entering cluster mode from
// another mode blends a rise from the applied value to the shared one over
// Blend; a fall is applied at once. (Follower.Step.)
func (n *Node) Delay(res string, local int, now time.Time) (int, Mode) {
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := n.state(res)
	if rs.leading {
		n.lead(rs, now)
	}
	prev := rs.f.Mode
	step, mode := rs.f.Step(n.cfg.timing(), local, now)
	if mode == ModeCluster && prev != ModeCluster {
		n.cfg.Log.Info("following the shared delay", "resource", res, "leader", rs.f.Shared.Leader)
	}
	if prev == ModeCluster && mode != ModeCluster {
		n.cfg.Log.Warn("shared delay lost; local control with the shared delay decaying", "resource", res,
			"last_seq", rs.f.Shared.Seq, "age", now.Sub(rs.f.RecvAt).Round(time.Millisecond), "decay", n.cfg.Decay)
	}
	if mode == ModeLocal && prev != ModeLocal {
		n.cfg.Log.Info("shared delay decayed; local control", "resource", res)
	}
	return step, mode
}

// lead runs the shared controller one tick (Leader.Step) and queues its
// record for the publisher.
func (n *Node) lead(rs *resState, now time.Time) {
	if !rs.lead.HasController() { // Renew: a new policy's gains and threshold
		ctrl, err := n.cfg.NewController(rs.name)
		if err != nil {
			n.cfg.Log.Error("cannot rebuild the shared controller; keeping the old step", "resource", rs.name, "err", err)
			return
		}
		rs.lead.Renewed(ctrl)
	}
	// Our own indicator is fresher in memory than its echo from etcd.
	l := rs.lead.Step(n.cfg.AgentID, rs.ind, rs.agents, &rs.f, n.cfg.timing(), n.cfg.Step, now)
	if l.Preset {
		agents := len(rs.agents)
		if _, ok := rs.agents[n.cfg.AgentID]; !ok {
			agents++
		}
		n.cfg.Log.Info("leading resource", "resource", rs.name, "agents", agents, "start_step", l.From)
	}
	if l.Rec != nil {
		l.Rec.Yield, l.Rec.YieldRev = rs.yield.ID, rs.yield.Rev
		rs.pending = l.Rec
		// Follow it now, not when etcd echoes it a tick later; its
		// freshness stays that of the last one etcd confirmed.
		rs.f.Own(*l.Rec)
		n.wake()
	}
}

// aggregate combines the agents' waits into the resource's indicator: the
// mean weighted by each agent's read traffic. The back end has one read
// wait; each agent samples it through the reads its own LUNs complete, so
// weighting by reads gives the mean over every read in the SAN, as if
// measured in one place — the same weighting the agent already uses across
// a resource's devices. An unweighted mean would let a host that saw one
// read in the interval count as much as one that saw thousands. Read bytes
// stand in for read counts (the agent's status has the former); if no agent
// reports traffic, agents with a wait count equally. NaN if nobody has a
// wait: the PID then holds its output, as it does for a local sampling gap.
func aggregate(agents map[string]Indicator) (wait, weight float64) {
	var sum, w, plain float64
	var n int
	for _, a := range agents {
		if math.IsNaN(a.WaitMs) || math.IsInf(a.WaitMs, 0) {
			continue
		}
		plain += a.WaitMs
		n++
		if a.ReadBps > 0 {
			sum += a.WaitMs * a.ReadBps
			w += a.ReadBps
		}
	}
	switch {
	case w > 0:
		return sum / w, w
	case n > 0:
		return plain / float64(n), 0
	}
	return math.NaN(), 0
}

// weightedLocalStep is where a new shared controller starts when there
// was no shared step: the agents' local outputs, weighted like their
// waits, rounded up (a throttle in force is not lightened by the takeover).
func weightedLocalStep(agents map[string]Indicator) int {
	var sum, w float64
	hi := 0
	for _, a := range agents {
		hi = max(hi, a.LocalStep)
		if a.ReadBps > 0 {
			sum += float64(a.LocalStep) * a.ReadBps
			w += a.ReadBps
		}
	}
	if w == 0 {
		return hi
	}
	return int(math.Ceil(sum/w - 1e-9))
}

// throttleable is the union of every agent's throttleable consumers.
func throttleable(agents map[string]Indicator) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, a := range agents {
		for _, c := range a.Consumers {
			if c.Throttleable && !seen[c.Addr] {
				seen[c.Addr] = true
				out = append(out, c.Addr)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

func (n *Node) wake() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// ResourceStatus is one resource's cluster state on this agent.
type ResourceStatus struct {
	Resource string        `json:"resource"`
	Mode     Mode          `json:"mode"`
	Leading  bool          `json:"leading"`
	Leader   string        `json:"leader,omitempty"`
	Seq      uint64        `json:"seq"`
	Step     int           `json:"shared_step"`
	Applied  float64       `json:"applied_step"`
	Age      time.Duration `json:"age_ns"`
	// Agents is how many agents' indicators the shared step came from.
	Agents int `json:"agents"`
	// Consumers the shared step applies to (all agents').
	Consumers []netip.Addr `json:"consumers,omitempty"`
}

// Status reports every resource's mode, for the agent's status.
func (n *Node) Status(now time.Time) []ResourceStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]ResourceStatus, 0, len(n.res))
	for _, rs := range n.res {
		s := ResourceStatus{Resource: rs.name, Mode: rs.f.Mode, Leading: rs.leading, Applied: rs.f.Applied}
		if f := &rs.f; f.HaveRec {
			s.Leader, s.Seq, s.Step, s.Age, s.Consumers = f.Shared.Leader, f.Shared.Seq, f.Shared.Step, now.Sub(f.RecvAt), f.Shared.Consumers
			s.Agents = f.Shared.Agents
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Resource < out[k].Resource })
	return out
}

// Renew rebuilds the shared controllers this agent leads, through
// NewController, at their next tick: a new policy (threshold, gains) takes
// effect on the shared loop, starting from the step in force.
func (n *Node) Renew() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, rs := range n.res {
		if rs.leading {
			rs.lead.Drop()
		}
	}
}

// Leading reports whether this agent leads the resource.
func (n *Node) Leading(res string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := n.res[res]
	return rs != nil && rs.leading
}

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
			rs.leading, rs.elec, rs.pending, rs.unlead, rs.yield, rs.requeue = false, nil, nil, nil, Candidate{}, nil
			rs.lead.Drop()
			clear(rs.agents)
			clear(rs.heard)
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
			again := asked && sctx.Err() == nil && n.sessionCtx == sctx && !rs.leading
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
		clear(rs.agents)
		clear(rs.heard)
		if err == nil {
			for _, kv := range resp.Kvs {
				n.apply(rs, string(kv.Key), kv.Value, false)
			}
			from = resp.Header.Revision + 1
		}
		lctx, unlead := context.WithCancel(sctx)
		rs.leading, rs.elec, rs.since, rs.unlead, rs.yield, rs.requeue = true, e, n.cfg.Now(), unlead, Candidate{}, nil
		rs.lead.Elected(ctrl)
		n.mu.Unlock()
		n.watchAgents(lctx, rs, from)
		unlead()
	}()
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
	leads, share := n.load()
	for _, rs := range n.res {
		if rs.pending != nil && rs.elec != nil {
			b, _ := EncodeShared(rs.pending)
			ws = append(ws, write{res: rs.name, key: DelayKey(n.cfg.Prefix, rs.name), val: string(b), rec: rs.pending,
				elec: rs.elec, elecKey: rs.elec.Key(), elecRev: rs.elec.Rev()})
			rs.pending = nil
		}
		if rs.dirty && now.Sub(rs.lastPub) >= n.cfg.PublishEvery {
			ind := rs.ind
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
			rs.f.Confirm(*w.rec, at)
		}
	}
}

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
	n.follow(ctx, rs, AgentsPrefix(n.cfg.Prefix, rs.name), true, func() { clear(rs.agents); clear(rs.heard) }, from)
}

// follow reads key (or the keys under it, with prefix) and watches it from
// the next revision until ctx ends; when a watch ends (etcd compacted past
// it, or lost its leader) it starts over with a fresh read. reset runs,
// under n.mu, before a fresh read is applied. With from > 0 the first read
// is skipped and the watch starts at from.
func (n *Node) follow(ctx context.Context, rs *resState, key string, prefix bool, reset func(), from int64) {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	for ctx.Err() == nil {
		if from == 0 {
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			resp, err := n.cfg.Client.Get(gctx, key, opts...)
			cancel()
			if err != nil {
				pause(ctx, retryPace)
				continue
			}
			n.mu.Lock()
			if reset != nil {
				reset()
			}
			for _, kv := range resp.Kvs {
				n.apply(rs, string(kv.Key), kv.Value, false)
			}
			n.mu.Unlock()
			from = resp.Header.Revision + 1
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range n.cfg.Client.Watch(wctx, key, append(opts, clientv3.WithRev(from))...) {
			if wr.Err() != nil {
				break
			}
			n.mu.Lock()
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					n.remove(rs, string(ev.Kv.Key))
				} else {
					n.apply(rs, string(ev.Kv.Key), ev.Kv.Value, true)
				}
			}
			n.mu.Unlock()
		}
		wcancel()
		from = 0
	}
}

// apply takes one key's value into rs. Called with n.mu held.
func (n *Node) apply(rs *resState, key string, val []byte, live bool) {
	switch {
	case key == DelayKey(n.cfg.Prefix, rs.name):
		rec, err := DecodeShared(val)
		if err != nil {
			n.cfg.Log.Warn("ignoring a malformed shared delay", "resource", rs.name, "err", err)
			return
		}
		var now time.Time
		if live {
			now = n.cfg.Now()
		}
		if rs.f.Receive(rec, live, now) && live && rec.Yield == n.cfg.AgentID && rec.YieldRev > rs.yielded &&
			!rs.leading && rs.requeue != nil {
			n.cfg.Log.Info("stepping back in the election line for a less loaded agent", "resource", rs.name, "leader", rec.Leader)
			rs.yielded = rec.YieldRev
			rs.requeue()
		}
	case strings.HasPrefix(key, AgentsPrefix(n.cfg.Prefix, rs.name)):
		ind, err := DecodeIndicator(val)
		if err != nil {
			n.cfg.Log.Warn("ignoring a malformed indicator", "key", key, "err", err)
			return
		}
		id := agentFromKey(n.cfg.Prefix, rs.name, key)
		rs.agents[id] = ind
		if live {
			rs.heard[id] = n.cfg.Now()
		}
	}
}

// remove forgets a deleted key (an agent's lease expired, a leader left).
func (n *Node) remove(rs *resState, key string) {
	if strings.HasPrefix(key, AgentsPrefix(n.cfg.Prefix, rs.name)) {
		id := agentFromKey(n.cfg.Prefix, rs.name, key)
		delete(rs.agents, id)
		delete(rs.heard, id)
	}
}

// retryPace spaces the retries of a failed etcd call: a client that is not
// connected fails at once, and retrying at once would spin a core.
const retryPace = 100 * time.Millisecond

// pause waits d or until ctx ends. It paces retries; it synchronises
// nothing.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
