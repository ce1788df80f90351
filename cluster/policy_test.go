package cluster

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/etcdtest"
)

const goodPolicy = `threshold: 12ms
resources:
  - name: vg1
    threshold: 10ms
    throttleable: [10.99.0.5]
  - name: vg2
    policy: slo-classes
    classes:
      - {name: gold, members: [10.99.0.2], latency: 5ms}
`

// TestValidatePolicy: the config package's validator decides, plus the
// rule that a policy sets shared keys only.
func TestValidatePolicy(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string // want: "" = valid, else a substring of the error
	}{
		{"good", goodPolicy, ""},
		{"empty", "", ""},
		{"not yaml", "resources: [", "policy refused"},
		{"not a mapping", "- a\n- b\n", "want a YAML mapping"},
		{"host key at top", "backend: netem\n", "backend: not a policy key"},
		{"host key in resource", "resources:\n  - name: vg1\n    devices: [loop3]\n", "resources[0].devices: a host's own setting"},
		{"bad threshold", "resources:\n  - name: vg1\n    threshold: -1ms\n", "line 3: resources[0].threshold"},
		{"unknown policy", "resources:\n  - name: vg1\n    policy: fastest\n", "line 3: resources[0].policy: fastest: want read-over-write|"},
		{"bad address", "resources:\n  - name: vg1\n    throttleable: [nothere]\n", "line 3: resources[0].throttleable[0]: nothere: not an IP address"},
		{"unknown field", "resources:\n  - name: vg1\n    treshold: 1ms\n", "treshold"},
		{"classes without slo", "resources:\n  - name: vg1\n    classes: [{name: a, members: [10.0.0.1]}]\n", "classes apply to policy slo-classes only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidatePolicy([]byte(tc.doc))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused a valid policy: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted an invalid policy")
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestMerge: a policy replaces shared keys, resource by resource, and
// leaves a host's own keys (devices, listeners) alone.
func TestMerge(t *testing.T) {
	own := `interval: 200ms
http: ""
discovery: {source: tgt}
resources:
  - name: vg1
    devices: [loop3, loop4]
    threshold: 30ms
`
	cfg, err := Merge([]byte(own), []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Interval != 200*time.Millisecond || cfg.Threshold != 12*time.Millisecond {
		t.Fatalf("interval %v threshold %v: want the host's 200ms and the policy's 12ms", cfg.Interval, cfg.Threshold)
	}
	if len(cfg.Resources) != 2 {
		t.Fatalf("%d resources, want vg1 (merged) and vg2 (added)", len(cfg.Resources))
	}
	r := cfg.Resources[0]
	if r.Name != "vg1" || r.Threshold != 10*time.Millisecond || strings.Join(r.Devices, ",") != "loop3,loop4" || len(r.Throttleable) != 1 {
		t.Fatalf("vg1 = %+v: want the policy's threshold and throttleable with the host's devices", r)
	}
	// Static discovery: resources the host does not list are not added
	// (it could not name their devices).
	static := "discovery: {source: static}\nresources:\n  - {name: vg1, devices: [loop3]}\n"
	cfg, err = Merge([]byte(static), []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Resources) != 1 || cfg.Resources[0].Threshold != 10*time.Millisecond {
		t.Fatalf("static: %+v", cfg.Resources)
	}
	// A policy that fits no agent config as a whole is refused by Merge.
	if _, err := Merge([]byte("max_delay: 5ms\ndelay_step: 1ms\n"), []byte("resources:\n  - {name: a, policy: slo-classes}\n")); err == nil {
		t.Fatal("merged a policy whose result is invalid")
	}
}

// TestPolicyPutRefusesBad: a refused policy writes nothing, not even over
// a good one.
func TestPolicyPutRefusesBad(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client()
	defer cli.Close()
	p := NewPolicies(cli, "/t1", nil)
	ctx := context.Background()
	bad := []string{"backend: netem\n", "resources:\n  - {name: vg1, threshold: 20s}\n", "resources: ["}
	for _, doc := range bad {
		if _, err := p.Put(ctx, []byte(doc)); err == nil {
			t.Fatalf("Put accepted %q", doc)
		}
	}
	if doc, rev, err := p.Get(ctx); err != nil || doc != nil || rev != 0 {
		t.Fatalf("after refused puts: doc %q rev %d err %v; want nothing written", doc, rev, err)
	}
	rev, err := p.Put(ctx, []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bad {
		if _, err := p.Put(ctx, []byte(doc)); err == nil {
			t.Fatalf("Put accepted %q", doc)
		}
	}
	doc, got, err := p.Get(ctx)
	if err != nil || got != rev || string(doc) != goodPolicy {
		t.Fatalf("after refused puts over a good one: rev %d (want %d), err %v, doc changed %v", got, rev, err, string(doc) != goodPolicy)
	}
	// PutIf refuses a stale revision.
	if _, err := p.PutIf(ctx, []byte(goodPolicy), rev-1); err == nil {
		t.Fatal("PutIf with a stale revision succeeded")
	}
	if _, err := p.PutIf(ctx, []byte(goodPolicy), rev); err != nil {
		t.Fatalf("PutIf at the current revision: %v", err)
	}
}

// TestPolicyReachesWatchers: a policy change reaches N watching agents,
// each with its own client; a bad policy written behind Put's back is
// refused by every one of them and the good one stays.
// It is one function because its policies (a warm-up, timed rounds, an
// invalid one) are written in order to one etcd watched by the same n
// agents.
func TestPolicyReachesWatchers(t *testing.T) {
	const n = 5
	srv := etcdtest.Start(t)
	admin := srv.Client()
	defer admin.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type got struct {
		agent int
		rev   int64
		at    time.Time
		err   error
	}
	ch := make(chan got, 4*n)
	var wg sync.WaitGroup
	for i := range n {
		cli := srv.Client()
		defer cli.Close()
		p := NewPolicies(cli, "/t2", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Watch(ctx, func(doc []byte, rev int64) error {
				ch <- got{agent: i, rev: rev, at: time.Now()}
				return nil
			}, func(rev int64, err error) { ch <- got{agent: i, rev: rev, at: time.Now(), err: err} })
		}()
	}
	// Each watcher has read the (empty) policy and is watching once a
	// first Put reaches all of them; only then is the clock started.
	p := NewPolicies(admin, "/t2", nil)
	warm, err := p.Put(ctx, []byte("threshold: 20ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	collect := func(rev int64) []got {
		t.Helper()
		var out []got
		deadline := time.After(10 * time.Second)
		for len(out) < n {
			select {
			case g := <-ch:
				if g.rev == rev {
					out = append(out, g)
				}
			case <-deadline:
				t.Fatalf("revision %d reached %d of %d watchers in 10s", rev, len(out), n)
			}
		}
		return out
	}
	collect(warm)
	for round := range 3 {
		start := time.Now()
		rev, err := p.Put(ctx, []byte(goodPolicy+"objective: mean\n"+strings.Repeat("#\n", round)))
		if err != nil {
			t.Fatal(err)
		}
		var worst time.Duration
		for _, g := range collect(rev) {
			if g.err != nil {
				t.Fatalf("agent %d refused a good policy: %v", g.agent, g.err)
			}
			worst = max(worst, g.at.Sub(start))
		}
		t.Logf("policy revision %d reached all %d agents in %v (from Put's call)", rev, n, worst)
		if worst > time.Second {
			t.Errorf("propagation %v, want < 1s", worst)
		}
	}
	// An invalid policy that bypassed Put: refused on read by every agent.
	resp, err := admin.Put(ctx, PolicyKey("/t2"), "resources:\n  - {name: vg1, threshold: -5ms}\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range collect(resp.Header.Revision) {
		if g.err == nil || !strings.Contains(g.err.Error(), "threshold") {
			t.Fatalf("agent %d applied an invalid policy (err %v)", g.agent, g.err)
		}
	}
	cancel()
	wg.Wait()
}
