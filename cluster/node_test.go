package cluster

import (
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/internal/etcdtest"
)

const (
	testRes      = "vg1"
	tickEvery    = 50 * time.Millisecond
	threshold    = 10.0 // ms
	maxSteps     = 40
	testDecay    = 2 * time.Second
	testFresh    = 500 * time.Millisecond
	testBlend    = time.Second
	fallbackWant = time.Second // the bound: local control within 1 s
)

func testPID(string) (control.Controller, error) {
	return control.NewPID(control.PIDConfig{Threshold: threshold, Kp: 0.8, Interval: tickEvery, Ti: 200 * time.Millisecond,
		MaxSteps: maxSteps, Step: control.DefaultStep, ReleaseBand: 0.25, ReleaseFactor: 0.5})
}

// agentSim is one agent as the tests drive it: the indicator its
// per-resource loop would publish and the local step its own controller
// would give, ticked explicitly.
type agentSim struct {
	id    string
	cli   *clientv3.Client
	node  *Node
	ind   Indicator
	local int
	dead  bool
	// Last tick's outcome.
	step int
	mode Mode
}

type harness struct {
	t      *testing.T
	srv    *etcdtest.Server
	agents []*agentSim
	// onTick, if set, sees every agent's outcome each tick (flap checks).
	onTick func(a *agentSim, prevStep int, prevMode Mode)
}

func newHarness(t *testing.T, prefix string, n int) *harness {
	return newHarnessDecay(t, prefix, n, testDecay)
}

// newHarnessDecay is newHarness with the agents' Decay set to decay.
func newHarnessDecay(t *testing.T, prefix string, n int, decay time.Duration) *harness {
	h := &harness{t: t, srv: etcdtest.Start(t)}
	for i := range n {
		a := &agentSim{id: fmt.Sprintf("host%d", i), cli: h.srv.Client(), mode: ModeLocal}
		node, err := NewNode(Config{Client: a.cli, Prefix: prefix, AgentID: a.id, Fresh: testFresh, Decay: decay,
			Blend: testBlend, PublishEvery: tickEvery, NewController: testPID})
		if err != nil {
			t.Fatal(err)
		}
		a.node = node
		t.Cleanup(func() { node.Close(); a.cli.Close() })
		h.agents = append(h.agents, a)
	}
	return h
}

// tick runs one control tick on every live agent, as its resource loop
// would: publish the indicator, then take the step.
func (h *harness) tick() {
	now := time.Now()
	for _, a := range h.agents {
		if a.dead {
			continue
		}
		a.ind.LocalStep = a.local
		a.node.Publish(testRes, a.ind, now)
		prevStep, prevMode := a.step, a.mode
		a.step, a.mode = a.node.Delay(testRes, a.local, now)
		if h.onTick != nil {
			h.onTick(a, prevStep, prevMode)
		}
	}
}

// until ticks every tickEvery until cond holds, and returns how long that
// took; it fails the test after limit. Ticking is the agents' own pace
// (their control interval), not a wait for something to happen.
func (h *harness) until(what string, limit time.Duration, cond func() bool) time.Duration {
	h.t.Helper()
	start := time.Now()
	tk := time.NewTicker(tickEvery)
	defer tk.Stop()
	for {
		h.tick()
		if cond() {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			h.t.Fatalf("%s: not within %v; %s", what, limit, h.describe())
		}
		<-tk.C
	}
}

// ticksFor ticks for d regardless of any condition.
func (h *harness) ticksFor(d time.Duration) {
	end := time.Now().Add(d)
	tk := time.NewTicker(tickEvery)
	defer tk.Stop()
	for time.Now().Before(end) {
		h.tick()
		<-tk.C
	}
}

func (h *harness) live() []*agentSim {
	var out []*agentSim
	for _, a := range h.agents {
		if !a.dead {
			out = append(out, a)
		}
	}
	return out
}

func (h *harness) all(f func(a *agentSim) bool) bool {
	for _, a := range h.live() {
		if !f(a) {
			return false
		}
	}
	return true
}

func (h *harness) leaders() []*agentSim {
	var out []*agentSim
	for _, a := range h.live() {
		if a.node.Leading(testRes) {
			out = append(out, a)
		}
	}
	return out
}

func (h *harness) describe() string {
	s := ""
	for _, a := range h.agents {
		st := a.node.Status(time.Now())
		var rs ResourceStatus
		if len(st) > 0 {
			rs = st[0]
		}
		s += fmt.Sprintf("[%s dead=%v step=%d mode=%s leading=%v leader=%s seq=%d shared=%d age=%v] ",
			a.id, a.dead, a.step, a.mode, rs.Leading, rs.Leader, rs.Seq, rs.Step, rs.Age.Round(time.Millisecond))
	}
	return s
}

var (
	writerA = netip.MustParseAddr("10.99.0.11")
	writerC = netip.MustParseAddr("10.99.0.13")
)

// saturate sets the scenario of the cluster tests: hosts 0 and 1 serve a
// reader that sees the back end saturated (30 ms against 10 ms) and their
// local controllers throttle fully; host 2 serves only a writer — it sees
// no reads, so its local controller would never throttle it. Only the
// shared step keeps that writer from escaping through host 2.
func (h *harness) saturate() {
	for i, a := range h.agents {
		switch i {
		case 2:
			a.ind = Indicator{WaitMs: math.NaN(), WriteBps: 50e6, Consumers: []Consumer{{Addr: writerC, Throttleable: true, WriteBps: 50e6}}}
			a.local = 0
		default:
			a.ind = Indicator{WaitMs: 30, ReadBps: 1e6, WriteBps: 20e6, Consumers: []Consumer{{Addr: writerA, Throttleable: true, WriteBps: 20e6}}}
			a.local = maxSteps
		}
	}
}

// heal makes every agent see a healthy back end.
func (h *harness) heal() {
	for _, a := range h.agents {
		a.ind.WaitMs, a.local = 2, 0
	}
}

// TestLeaderDelayAppliedByAll: three agents elect one leader, which
// aggregates their indicators and publishes a delay that all three apply,
// including the one whose own measurements would never throttle.
func TestLeaderDelayAppliedByAll(t *testing.T) {
	h := newHarness(t, "/t3", 3)
	h.saturate()
	took := h.until("all in cluster mode at the leader's step", 10*time.Second, func() bool {
		return len(h.leaders()) == 1 && h.all(func(a *agentSim) bool { return a.mode == ModeCluster && a.step == maxSteps })
	})
	t.Logf("leader %s elected and its step applied by all 3 agents %v after start", h.leaders()[0].id, took)
	st := h.agents[2].node.Status(time.Now())[0]
	if st.Agents != 3 || len(st.Consumers) != 2 || st.Consumers[0] != writerA || st.Consumers[1] != writerC {
		t.Fatalf("shared record names %d agents and consumers %v; want 3 agents and both writers", st.Agents, st.Consumers)
	}
	// The load goes: the shared controller releases everyone.
	h.heal()
	h.until("all released", 5*time.Second, func() bool {
		return h.all(func(a *agentSim) bool { return a.mode == ModeCluster && a.step == 0 })
	})
}

func TestAggregate(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name   string
		agents []Indicator
		want   float64
	}{
		{"read-weighted", []Indicator{{WaitMs: 10, ReadBps: 3e6}, {WaitMs: 50, ReadBps: 1e6}}, 20},
		{"an idle host's noisy wait does not count", []Indicator{{WaitMs: 10, ReadBps: 3e6}, {WaitMs: 500}}, 10},
		{"no traffic reported: plain mean", []Indicator{{WaitMs: 10}, {WaitMs: 20}}, 15},
		{"no reads anywhere", []Indicator{{WaitMs: nan}}, nan},
	} {
		got, _ := aggregate(tc.agents)
		if !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAggregateReproducible: the same indicators give the same wait to
// the last bit, however the map that holds them happens to be ranged over
// (Go draws a new order for every range), because they are summed in the
// agents' id order. Float addition is not associative: 0.1+0.2+0.3+0.4 is
// 1 in that order, 0.9999999999999999 from the back and 1.0000000000000002
// as 0.4+0.2+0.3+0.1, so a sum in a map's order differs between calls.
func TestAggregateReproducible(t *testing.T) {
	a, b, c, d := 0.1, 0.2, 0.3, 0.4 // variables: constants would be summed exactly
	// a's echo is stale: its own indicator is laid over it.
	agents := map[string]Indicator{"a": {WaitMs: 9}, "b": {WaitMs: b}, "c": {WaitMs: c}, "d": {WaitMs: d}}
	own := Indicator{WaitMs: a}
	want, _ := aggregate(inIDOrder("a", own, agents))
	if want != (a+b+c+d)/4 {
		t.Fatalf("wait %v; want the mean of a's own, b, c and d in id order, %v", want, (a+b+c+d)/4)
	}
	if back, _ := aggregate([]Indicator{{WaitMs: d}, {WaitMs: c}, {WaitMs: b}, {WaitMs: a}}); back == want {
		t.Fatal("the reverse order sums to the same wait: the test shows nothing")
	}
	for range 200 {
		if got, _ := aggregate(inIDOrder("a", own, agents)); got != want {
			t.Fatalf("the same indicators gave %v, then %v", want, got)
		}
	}
}

// TestDelayModes drives the follower side with a fake clock and no etcd:
// fresh shared step followed (blended in from the local step), lost →
// degraded with the residue decaying to zero within Decay → local.
func TestDelayModes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clock := t0
	n := &Node{cfg: Config{Fresh: testFresh, Decay: testDecay, Blend: testBlend, Now: func() time.Time { return clock }}, res: map[string]*resState{}}
	n.cfg.Log = discard()
	rs := &resState{name: testRes, Seat: NewSeat()}
	n.res[testRes] = rs
	step := func(local int, at time.Duration) (int, Mode) {
		clock = t0.Add(at)
		return n.Delay(testRes, local, clock)
	}
	// Local only.
	if s, m := step(3, 0); s != 3 || m != ModeLocal {
		t.Fatalf("no cluster: %d %s", s, m)
	}
	// A shared record of 20 arrives: blend from 3 to 20 over a second.
	n.mu.Lock()
	rs.F.Shared, rs.F.HaveRec, rs.F.RecvAt = Shared{Seq: 1, Step: 20}, true, t0.Add(100*time.Millisecond)
	n.mu.Unlock()
	if s, m := step(3, 100*time.Millisecond); s != 3 || m != ModeCluster {
		t.Fatalf("joining: %d %s, want 3 cluster (no jump)", s, m)
	}
	if s, _ := step(3, 600*time.Millisecond); s < 11 || s > 12 {
		t.Fatalf("half-way through the blend: %d, want ~11.5", s)
	}
	n.mu.Lock()
	rs.F.RecvAt = t0.Add(1100 * time.Millisecond)
	n.mu.Unlock()
	if s, _ := step(3, 1100*time.Millisecond); s != 20 {
		t.Fatalf("after the blend: %d, want 20", s)
	}
	// A fall is not blended: the shared step drops to 5, applied at once.
	n.mu.Lock()
	rs.F.Shared, rs.F.RecvAt = Shared{Seq: 2, Step: 5}, t0.Add(1100*time.Millisecond)
	n.mu.Unlock()
	if s, _ := step(3, 1100*time.Millisecond); s != 5 {
		t.Fatalf("shared step fell to 5: applied %d", s)
	}
	// And a rise after the blend is over follows at once (the shared
	// controller's own pace), as a local controller's would.
	n.mu.Lock()
	rs.F.Shared = Shared{Seq: 3, Step: 20}
	n.mu.Unlock()
	if s, _ := step(3, 1100*time.Millisecond); s != 20 {
		t.Fatalf("shared step back to 20: applied %d", s)
	}
	// No record since 1.1 s: fresh until 1.6 s, degraded after.
	if _, m := step(3, 1600*time.Millisecond); m != ModeCluster {
		t.Fatalf("at Fresh: %s", m)
	}
	if s, m := step(3, 1650*time.Millisecond); s != 20 || m != ModeDegraded {
		t.Fatalf("just lost: %d %s, want 20 degraded", s, m)
	}
	if s, _ := step(3, 1650*time.Millisecond+testDecay/2); s != 10 {
		t.Fatalf("half-way through the decay: %d, want 10", s)
	}
	if s, m := step(3, 1650*time.Millisecond+testDecay); s != 3 || m != ModeLocal {
		t.Fatalf("after Decay: %d %s, want the local 3", s, m)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestLeaderFailover: the leader's agent dies (its client closed: no
// goodbye, its lease runs out). Another agent takes the resource over,
// starting from the step in force, and no consumer stays throttled past
// the bound once the load is gone. While the load stays, the writer that
// only the shared step throttles (host2's) is never let go during the
// hand-over: the lost step's residue holds it until the new leader's
// record comes, and that record, starting from the step in force, never
// lowers it.
func TestLeaderFailover(t *testing.T) {
	for _, tc := range []struct {
		name      string
		loadStays bool
		// decay is the agents' Decay. Holding the writer through the
		// hand-over needs one that outlasts the failover (Config.Decay):
		// testDecay does not. The old leader's lease lives 1.3–2 s past
		// the kill (TTL 2 s, renewed every TTL/3), etcd's expiry scan adds
		// up to 0.5 s and the new leader's first record a tick or two,
		// while the residue is gone Fresh + Decay = 2.5 s after the last
		// record: a race the writer loses now and then. DefaultDecay
		// (4 s) is the production setting made for it.
		decay time.Duration
	}{
		{"load stays", true, DefaultDecay},
		{"load goes", false, testDecay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessDecay(t, "/t4", 3, tc.decay)
			h.saturate()
			h.until("cluster established", 10*time.Second, func() bool {
				return len(h.leaders()) == 1 && h.all(func(a *agentSim) bool { return a.mode == ModeCluster && a.step == maxSteps })
			})
			old := h.leaders()[0]
			old.cli.Close() // the leader's host dies
			old.dead = true
			if !tc.loadStays {
				h.heal()
			}
			killed := time.Now()
			minWriterOnly := maxSteps
			h.onTick = func(a *agentSim, prev int, prevMode Mode) {
				if a.id != "host2" {
					return
				}
				minWriterOnly = min(minWriterOnly, a.step)
				// Only the lost step's decay may lower the writer: a
				// leader's record (cluster mode) that does took over from
				// something other than the step in force.
				if tc.loadStays && a.mode == ModeCluster && a.step < prev {
					t.Errorf("writer-only host lowered from step %d (%s) to %d by a shared step during the hand-over: the new leader did not start from the step in force (%d)",
						prev, prevMode, a.step, maxSteps)
				}
			}
			bound := time.Duration(2)*time.Second /* TTL */ + testFresh + tc.decay + time.Second
			if tc.loadStays {
				took := h.until("new leader followed by all survivors", bound, func() bool {
					l := h.leaders()
					return len(l) == 1 && l[0] != old && h.all(func(a *agentSim) bool {
						st := a.node.Status(time.Now())[0]
						return a.mode == ModeCluster && st.Leader != old.id && a.step == maxSteps
					})
				})
				t.Logf("failover: %s took over from %s, followed by all survivors %v after the kill; writer-only host's step never below %d",
					h.leaders()[0].id, old.id, took, minWriterOnly)
				if minWriterOnly <= 0 {
					t.Errorf("writer-only host released (step %d) during the hand-over, with the load still there: the lost shared step (decaying over %v) must hold it until the new leader's record",
						minWriterOnly, tc.decay)
				}
				return
			}
			took := h.until("every consumer released", bound, func() bool {
				return h.all(func(a *agentSim) bool { return a.step == 0 })
			})
			t.Logf("load gone with the leader: every survivor at step 0 %v after the kill (bound %v)", took, bound)
			h.onTick = nil
			h.until("a new leader", bound, func() bool { l := h.leaders(); return len(l) == 1 && l[0] != old })
			t.Logf("new leader %s %v after the kill", h.leaders()[0].id, time.Since(killed).Round(time.Millisecond))
			// Released stays released: nothing re-throttles a healthy resource.
			h.onTick = func(a *agentSim, _ int, _ Mode) {
				if a.step != 0 {
					t.Errorf("%s throttled again (step %d) on a healthy resource", a.id, a.step)
				}
			}
			h.ticksFor(time.Second)
		})
	}
}

// TestEtcdDeath: etcd dies mid-run. Every agent leaves cluster mode within
// 1 s, the shared step decays to zero within Decay (the writer-only host,
// whose own controller never throttles, ends unthrottled), and when etcd
// comes back every agent rejoins without a flap: no jump in its step and
// no second exit from cluster mode.
func TestEtcdDeath(t *testing.T) {
	h := newHarness(t, "/t5", 3)
	h.saturate()
	h.until("cluster established", 10*time.Second, func() bool {
		return len(h.leaders()) == 1 && h.all(func(a *agentSim) bool { return a.mode == ModeCluster && a.step == maxSteps })
	})
	h.srv.Stop()
	left := h.until("every agent out of cluster mode", 5*time.Second, func() bool {
		return h.all(func(a *agentSim) bool { return a.mode != ModeCluster })
	})
	t.Logf("etcd killed: every agent in local control after %v", left)
	if left > fallbackWant {
		t.Errorf("fallback took %v, want < %v", left, fallbackWant)
	}
	decayed := h.until("shared step decayed", testDecay+time.Second, func() bool {
		return h.all(func(a *agentSim) bool { return a.mode == ModeLocal && a.step == a.local })
	})
	t.Logf("shared step decayed to zero (every agent at its local step, the writer-only host at %d) %v later (Decay %v)",
		h.agents[2].step, decayed, testDecay)

	// Rejoin: once an agent is back in cluster mode it must stay there, and
	// its step may move only as fast as the blend allows.
	const maxJump = maxSteps / 4
	back := map[string]bool{}
	h.onTick = func(a *agentSim, prev int, prevMode Mode) {
		if a.mode == ModeCluster {
			back[a.id] = true
		} else if back[a.id] {
			t.Errorf("%s flapped: left cluster mode (%s) after rejoining", a.id, a.mode)
		}
		if d := a.step - prev; d > maxJump || d < -maxJump {
			t.Errorf("%s jumped from step %d to %d (%s → %s)", a.id, prev, a.step, prevMode, a.mode)
		}
	}
	restarted := time.Now()
	h.srv.Restart()
	took := h.until("every agent back at the shared step", 20*time.Second, func() bool {
		return len(h.leaders()) == 1 && h.all(func(a *agentSim) bool { return a.mode == ModeCluster && a.step == maxSteps })
	})
	t.Logf("etcd restarted (healthy %v after the call): every agent back in cluster mode at the shared step %v after restart",
		took, time.Since(restarted).Round(time.Millisecond))
	h.ticksFor(time.Second)
}
