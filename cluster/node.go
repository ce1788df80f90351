package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sanqos/sanqos/control"
)

// DefaultPrefix is where sanqos keeps its keys; v1 is the layout's version.
const DefaultPrefix = "/sanqos/v1"

// Config configures a Node.
type Config struct {
	// Client is etcd's; KV, if set, stands for it (package sim's model),
	// and Runtime for the Go runtime and the wall clock (default
	// RealTime).
	Client  *clientv3.Client
	KV      KV
	Runtime Runtime
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
	// Now is the clock that stamps received records (default the
	// Runtime's); it must be the clock of the now passed to Delay.
	Now func() time.Time
	Log *slog.Logger
}

func (c *Config) defaults() error {
	if c.KV == nil && c.Client != nil {
		c.KV = Etcd(c.Client)
	}
	if c.KV == nil {
		return errors.New("cluster: no etcd client")
	}
	if c.Runtime == nil {
		c.Runtime = RealTime{}
	}
	if c.AgentID == "" || strings.ContainsAny(c.AgentID, "/ \t\n") {
		return fmt.Errorf("cluster: agent id %q: want a non-empty name without slashes or spaces", c.AgentID)
	}
	if c.NewController == nil {
		return errors.New("cluster: no NewController")
	}
	c.Prefix = strings.TrimRight(cmp.Or(c.Prefix, DefaultPrefix), "/")
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
	c.BalanceEvery = cmp.Or(c.BalanceEvery, DefaultBalanceEvery)
	if c.BalanceHold <= 0 {
		c.BalanceHold = DefaultBalanceHold
	}
	c.Log = cmp.Or(c.Log, slog.New(slog.DiscardHandler))
	if c.Now == nil {
		c.Now = c.Runtime.Now
	}
	return nil
}

func (c *Config) timing() Timing { return Timing{Fresh: c.Fresh, Decay: c.Decay, Blend: c.Blend} }

// Node is one agent's membership in the cluster. Its methods never block
// on etcd: Publish and Delay work on memory that background goroutines
// keep in step with etcd, so an unreachable etcd slows no control tick.
type Node struct {
	cfg    Config
	rt     Runtime
	kv     KV
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	res map[string]*resState
	// all are the resources in the order they came: every loop over
	// them runs in it, so that a seed of the simulator gives one run.
	all     []*resState
	session Session
	// sessionCtx ends with the session: campaigns run under it.
	sessionCtx context.Context
	kick       Wake // wakes the publisher
}

// resState is one resource on this agent: its Seat (the state the
// cluster's rules change) and the etcd handles that go with it. Guarded
// by Node.mu.
type resState struct {
	name string
	Seat
	// Local side: when the indicator (Seat.Ind) was measured and whether
	// it is written yet.
	indTime time.Time
	dirty   bool
	lastPub time.Time
	// Leader side: the election won, and unlead, which ends the
	// leadership (its watch of the indicators), for a handover.
	elec   Election
	unlead context.CancelFunc
	// Candidate side: requeue ends the campaign in progress, which then
	// campaigns again from the back of the line (Seat.Receive).
	requeue context.CancelFunc
}

// seats are the Seats of the agent's resources. Called with n.mu held.
func (n *Node) seats() iter.Seq[*Seat] {
	return func(yield func(*Seat) bool) {
		for _, rs := range n.all {
			if !yield(&rs.Seat) {
				return
			}
		}
	}
}

// NewNode joins the cluster: it keeps a session (lease) with etcd, and
// for each resource it is told about publishes, watches and campaigns.
// Close leaves.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rt := cfg.Runtime
	ctx, cancel := rt.WithCancel(context.Background())
	n := &Node{cfg: cfg, rt: rt, kv: cfg.KV, ctx: ctx, cancel: cancel, res: map[string]*resState{}, kick: rt.NewWake()}
	n.goes(n.sessions)
	n.goes(n.publisher)
	if cfg.BalanceEvery > 0 {
		n.goes(n.balancer)
	}
	return n, nil
}

// goes runs f in a goroutine of the node's, which Close waits for.
func (n *Node) goes(f func()) {
	n.wg.Add(1)
	n.rt.Go(func() { defer n.wg.Done(); f() })
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
	rs = &resState{name: res, Seat: NewSeat()}
	n.res[res] = rs
	n.all = append(n.all, rs)
	n.goes(func() { n.watch(rs) })
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
	rs.Ind, rs.indTime, rs.dirty = ind, now, true
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
	prev := rs.F.Mode
	step, mode, led, err := rs.Tick(n.cfg.AgentID, local, n.cfg.timing(), n.cfg.Step, now,
		func() (control.Controller, error) { return n.cfg.NewController(rs.name) })
	n.led(rs, led, err)
	if mode == ModeCluster && prev != ModeCluster {
		n.cfg.Log.Info("following the shared delay", "resource", res, "leader", rs.F.Shared.Leader)
	}
	if prev == ModeCluster && mode != ModeCluster {
		n.cfg.Log.Warn("shared delay lost; local control with the shared delay decaying", "resource", res,
			"last_seq", rs.F.Shared.Seq, "age", now.Sub(rs.F.RecvAt).Round(time.Millisecond), "decay", n.cfg.Decay)
	}
	if mode == ModeLocal && prev != ModeLocal {
		n.cfg.Log.Info("shared delay decayed; local control", "resource", res)
	}
	return step, mode
}

// led logs what the leader's tick did (Seat.Tick) and wakes the
// publisher for its record.
func (n *Node) led(rs *resState, l Lead, err error) {
	if err != nil {
		n.cfg.Log.Error("cannot rebuild the shared controller; keeping the old step", "resource", rs.name, "err", err)
		return
	}
	if l.Preset {
		agents := len(rs.Agents)
		if _, ok := rs.Agents[n.cfg.AgentID]; !ok {
			agents++
		}
		n.cfg.Log.Info("leading resource", "resource", rs.name, "agents", agents, "start_step", l.From)
	}
	if l.Rec != nil {
		n.wake()
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
	out := make([]ResourceStatus, 0, len(n.all))
	for _, rs := range n.all {
		s := ResourceStatus{Resource: rs.name, Mode: rs.F.Mode, Leading: rs.Leading, Applied: rs.F.Applied}
		if f := &rs.F; f.HaveRec {
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
	for _, rs := range n.all {
		rs.Renew()
	}
}

// Leading reports whether this agent leads the resource.
func (n *Node) Leading(res string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := n.res[res]
	return rs != nil && rs.Leading
}

// retryPace spaces the retries of a failed etcd call: a client that is not
// connected fails at once, and retrying at once would spin a core.
const retryPace = 100 * time.Millisecond

// pause waits retryPace or until ctx ends. It paces retries; it
// synchronises nothing.
func (n *Node) pause(ctx context.Context) { n.rt.Sleep(ctx, retryPace, nil) }
