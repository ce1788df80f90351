package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sanqos/sanqos/internal/etcdtest"
)

// multiTick runs one control tick of every resource on node: publish the
// indicator, then take the step, as the agent's resource loops would.
func multiTick(node *Node, res []string, ind Indicator, local int) map[string]Mode {
	now := time.Now()
	modes := map[string]Mode{}
	for _, r := range res {
		ind.LocalStep = local
		node.Publish(r, ind, now)
		_, modes[r] = node.Delay(r, local, now)
	}
	return modes
}

// TestDeposedRecordDoesNotLand: the publisher writes a round's records in
// one transaction, each fenced by its own election key. A leader that has
// lost one resource without knowing it (its election key deleted behind
// its back) keeps making records for both; the lost resource's records
// never land, the other's go on landing in the same rounds, and the
// deposed leader leaves the shared step of the lost one within Fresh,
// since etcd confirms none of its records there.
func TestDeposedRecordDoesNotLand(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client()
	t.Cleanup(func() { cli.Close() })
	const prefix = "/tfence"
	node, err := NewNode(Config{Client: cli, Prefix: prefix, AgentID: "host0", Fresh: testFresh, Decay: testDecay,
		Blend: testBlend, PublishEvery: tickEvery, NewController: testPID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	lost, kept := "lost", "kept"
	res := []string{lost, kept}
	ind := Indicator{WaitMs: 30, ReadBps: 1e6}
	tk := time.NewTicker(tickEvery)
	defer tk.Stop()
	tickUntil := func(what string, limit time.Duration, cond func(modes map[string]Mode) bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			if cond(multiTick(node, res, ind, maxSteps)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; %+v", what, limit, node.Status(time.Now()))
			}
			<-tk.C
		}
	}
	tickUntil("leading both, in cluster mode", 10*time.Second, func(m map[string]Mode) bool {
		return node.Leading(lost) && node.Leading(kept) && m[lost] == ModeCluster && m[kept] == ModeCluster
	})

	// Depose it on one resource: delete its election key, as an expired
	// lease or an operator would. The node is not told.
	ctx := context.Background()
	if _, err := cli.Delete(ctx, ElectionKey(prefix, lost)+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	deposedAt := time.Now()
	before, err := cli.Get(ctx, DelayKey(prefix, lost))
	if err != nil || len(before.Kvs) != 1 {
		t.Fatalf("lost resource's record: %v %v", before, err)
	}
	keptBefore, err := cli.Get(ctx, DelayKey(prefix, kept))
	if err != nil || len(keptBefore.Kvs) != 1 {
		t.Fatalf("kept resource's record: %v %v", keptBefore, err)
	}
	w := cli.Watch(ctx, prefix+"/resources/", clientv3.WithPrefix(), clientv3.WithRev(before.Header.Revision+1))

	// Tick until the kept resource's record has been rewritten five
	// times (its leader republishes at least every Fresh/3) and the lost
	// one has left cluster mode on this node.
	keptPuts, lostPuts := 0, 0
	var fellAfter time.Duration
	tickUntil("five more records of the kept resource and the lost one out of cluster mode", 10*time.Second, func(m map[string]Mode) bool {
		if fellAfter == 0 && m[lost] != ModeCluster {
			fellAfter = time.Since(deposedAt)
		}
		for {
			select {
			case wr := <-w:
				for _, ev := range wr.Events {
					switch string(ev.Kv.Key) {
					case DelayKey(prefix, lost):
						lostPuts++
					case DelayKey(prefix, kept):
						keptPuts++
					}
				}
				continue
			default:
			}
			break
		}
		if !node.Leading(lost) {
			t.Fatal("the node noticed it was deposed: the test shows nothing")
		}
		return keptPuts >= 5 && fellAfter > 0
	})
	if lostPuts != 0 {
		t.Fatalf("a deposed leader's record landed %d times", lostPuts)
	}
	after, err := cli.Get(ctx, DelayKey(prefix, lost))
	if err != nil || len(after.Kvs) != 1 || after.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
		t.Fatalf("the lost resource's record changed: %v → %v (%v)", before.Kvs, after.Kvs, err)
	}
	t.Logf("deposed on %q: none of its records landed while %d of %q's did; it left the shared step %v after",
		lost, keptPuts, kept, fellAfter.Round(time.Millisecond))
	if fellAfter > testFresh+2*tickEvery {
		t.Errorf("the deposed leader followed its own unconfirmed records for %v; want within Fresh (%v) and a tick", fellAfter, testFresh)
	}
}

// TestLeaderAppliesOwnStepAtOnce: the leader follows the record it makes
// in the tick that makes it, not a tick later when etcd echoes it.
func TestLeaderAppliesOwnStepAtOnce(t *testing.T) {
	h := newHarness(t, "/town", 3)
	h.saturate()
	h.until("cluster established", 10*time.Second, func() bool {
		return len(h.leaders()) == 1 && h.all(func(a *agentSim) bool { return a.mode == ModeCluster && a.step == maxSteps })
	})
	leader := h.leaders()[0]
	made := func() (step int, seq uint64) {
		leader.node.mu.Lock()
		defer leader.node.mu.Unlock()
		rs := leader.node.res[testRes]
		return rs.lead.lastStep, rs.lead.seq
	}
	// The load goes: the shared controller steps down tick by tick, and
	// a fall is applied at once (no blend), so every tick's step is the
	// record that tick made.
	h.heal()
	changes, prev := 0, maxSteps
	h.until("the leader released", 5*time.Second, func() bool {
		step, seq := made()
		if leader.mode != ModeCluster {
			t.Fatalf("leader left cluster mode (%s)", leader.mode)
		}
		if leader.step != step {
			t.Fatalf("leader applied %d in the tick that made its record %d (step %d); want the same", leader.step, seq, step)
		}
		if step != prev {
			changes++
			prev = step
		}
		return step == 0
	})
	if changes < 2 {
		t.Fatalf("the shared step moved %d times: the test shows nothing", changes)
	}
	t.Logf("the leader applied each of %d new shared steps in the tick that made it", changes)
}

// TestLeadershipSpreads: three agents serving nine resources, started at
// once, share the leaderships: each leads 2-4 after settling, leadership
// then stays put (no flapping), and no agent leaves the shared step of
// any resource while leaders hand resources over.
func TestLeadershipSpreads(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix, nres = "/tspread", 9
	var res []string
	for i := range nres {
		res = append(res, fmt.Sprintf("vg%d", i))
	}
	var nodes []*Node
	for i := range 3 {
		cli := srv.Client()
		node, err := NewNode(Config{Client: cli, Prefix: prefix, AgentID: fmt.Sprintf("host%d", i), Fresh: testFresh, Decay: testDecay,
			Blend: testBlend, PublishEvery: tickEvery, NewController: testPID, BalanceEvery: 100 * time.Millisecond, BalanceHold: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close(); cli.Close() })
		nodes = append(nodes, node)
	}
	ind := Indicator{WaitMs: 30, ReadBps: 1e6}
	leaders := func() (map[string]string, []int) {
		by := map[string]string{}
		led := make([]int, len(nodes))
		for i, n := range nodes {
			for _, r := range res {
				if n.Leading(r) {
					if by[r] != "" {
						by[r] = "two leaders"
					} else {
						by[r] = n.ID()
					}
					led[i]++
				}
			}
		}
		return by, led
	}
	tk := time.NewTicker(tickEvery)
	defer tk.Stop()
	formed := false
	var firstLed []int
	tick := func() {
		all := true
		for _, n := range nodes {
			for r, m := range multiTick(n, res, ind, maxSteps) {
				if m != ModeCluster {
					all = false
					if formed {
						t.Errorf("%s left the shared step of %s (%s) while nothing failed", n.ID(), r, m)
					}
				}
			}
		}
		if all && !formed {
			formed = true
			_, firstLed = leaders()
		}
	}
	start := time.Now()
	var led []int
	for {
		tick()
		var by map[string]string
		by, led = leaders()
		ok := formed && len(by) == nres
		for _, r := range res {
			ok = ok && by[r] != "" && by[r] != "two leaders"
		}
		for _, l := range led {
			ok = ok && l >= 2 && l <= 4
		}
		if ok {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("leadership not spread within 20 s: leads %v, leaders %v (formed %v)", led, by, formed)
		}
		<-tk.C
	}
	settled := time.Since(start)
	// Settled: it stays put for a while (several looks and holds).
	by, _ := leaders()
	moves := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); <-tk.C {
		tick()
		now, l := leaders()
		for _, r := range res {
			if now[r] != by[r] {
				moves++
			}
		}
		by, led = now, l
	}
	t.Logf("leads %v at formation, %v after %v; %d moves in the next 2 s", firstLed, led, settled.Round(time.Millisecond), moves)
	for i, l := range led {
		if l < 2 || l > 4 {
			t.Errorf("%s leads %d of %d after settling, want 2-4", nodes[i].ID(), l, nres)
		}
	}
	if moves > 1 {
		t.Errorf("leadership moved %d times after settling: flapping", moves)
	}
}
