package agent

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/discover"
	"github.com/sanqos/sanqos/throttle"
)

// reloadAgent is an agent on discovery from snap (the config's resources
// mapped onto it as SnapshotDiscoverer does), whose reloads rebuild the
// discoverer from the new config; fail makes that discovery fail.
func reloadAgent(t *testing.T, yaml string, snap discover.Snapshot, fail *error) *Agent {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	newDisc := func(c *config.Config) (Discoverer, error) {
		return SnapshotDiscoverer{Resources: c.Resources, Snap: func() (discover.Snapshot, error) { return snap, *fail }}, nil
	}
	d, _ := newDisc(cfg)
	a := New(cfg, Deps{Throttle: throttle.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewController: func(*config.Config, config.Resource) Controller { return &propCtl{} },
		NewSmoother:   func(float64) Smoother { return &lastValue{} },
		Discoverer:    d, NewDiscoverer: newDisc})
	a.discoverOnce()
	return a
}

// A reload applies its resources, devices and discovery settings
// together, with a discovery round of its own before the swap, or is
// refused whole and the running config and topology stay.
func TestReloadAppliesAllOrRefuses(t *testing.T) {
	const start = "backend: dry-run\nresources:\n  - name: vg1\n"
	noErr, boom := error(nil), errors.New("tgtadm: can't connect")
	for _, tc := range []struct {
		name   string
		next   string
		fail   *error
		refuse string              // "" : applied
		mapped map[string][]string // after, by resource (unchanged when refused)
		unmap  []string
	}{
		{"a resource added is mapped at once", "backend: dry-run\nresources:\n  - name: vg1\n  - name: vg2\n", &noErr, "",
			map[string][]string{"vg1": {"loop0", "loop1"}, "vg2": {"loop2"}}, nil},
		{"devices named instead of auto", "backend: dry-run\nresources:\n  - name: vg1\n    devices: [loop1]\n", &noErr, "",
			map[string][]string{"vg1": {"loop1"}}, nil},
		{"a typo added: applied, named unmapped", "backend: dry-run\nresources:\n  - name: vg1\n  - name: vg3\n", &noErr, "",
			map[string][]string{"vg1": {"loop0", "loop1"}}, []string{"vg3"}},
		{"no resources: refused", "backend: dry-run\nresources: []\n", &noErr, "lists no resources",
			map[string][]string{"vg1": {"loop0", "loop1"}}, nil},
		{"discovery that fails: refused", "backend: dry-run\nresources:\n  - name: vg1\n  - name: vg2\n", &boom, "discovery with the new config fails: tgtadm: can't connect",
			map[string][]string{"vg1": {"loop0", "loop1"}}, nil},
		{"a restart key: refused", "backend: delayline\nresources:\n  - name: vg1\n  - name: vg2\n", &noErr, "needs a restart: backend",
			map[string][]string{"vg1": {"loop0", "loop1"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail := noErr
			a := reloadAgent(t, start, twoPools(), &fail)
			nc, err := config.Parse([]byte(tc.next))
			if err != nil {
				t.Fatal(err)
			}
			fail = *tc.fail
			err = a.Reload(nc)
			if tc.refuse == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse) || !strings.Contains(err.Error(), "the running config stays")) {
				t.Fatalf("err = %v, want refused saying %q", err, tc.refuse)
			}
			topo := a.loops.gen.Load().topo
			specs := a.loops.gen.Load().specs
			if len(topo.Resources) != len(tc.mapped) {
				t.Errorf("mapped %v, want %v", topo.Resources, tc.mapped)
			}
			for name, devs := range tc.mapped {
				if got := topo.Resources[name].Devices; strings.Join(got, ",") != strings.Join(devs, ",") {
					t.Errorf("%s on %v, want %v", name, got, devs)
				}
				if _, ok := specs[name]; !ok {
					t.Errorf("%s mapped but not among the loops' resources %v", name, specs)
				}
			}
			for _, name := range tc.unmap {
				if _, ok := a.Unmapped()[name]; !ok {
					t.Errorf("%s not named unmapped: %v", name, a.Unmapped())
				}
			}
			if want := len(tc.mapped) + len(tc.unmap); len(specs) != want {
				t.Errorf("%d resources run, want %d", len(specs), want)
			}
		})
	}
}

// A discovery round of the discoverer a reload replaced, ending after
// the reload, publishes nothing: the old config's mapping cannot come
// back.
func TestStaleDiscoveryRoundDropped(t *testing.T) {
	fail := error(nil)
	a := reloadAgent(t, "backend: dry-run\nresources:\n  - name: vg1\n", twoPools(), &fail)
	old := &blockingDiscoverer{entered: make(chan struct{}), release: make(chan struct{}),
		t: &Topology{Resources: map[string]ResourceView{"vg1": {Devices: []string{"loop9"}}}}}
	a.deps.Discoverer = old
	done := make(chan struct{})
	go func() { a.discoverOnce(); close(done) }()
	<-old.entered // the old discoverer's round is under way
	nc, _ := config.Parse([]byte("backend: dry-run\nresources:\n  - name: vg1\n  - name: vg2\n"))
	if err := a.Reload(nc); err != nil {
		t.Fatal(err)
	}
	after := a.loops.gen.Load().topo
	close(old.release)
	<-done
	if got := a.loops.gen.Load().topo; got != after || len(got.Resources) != 2 {
		t.Errorf("the replaced discoverer's round was published after the reload: %v", got.Resources)
	}
}

// blockingDiscoverer's round waits for release, after saying it began.
type blockingDiscoverer struct {
	entered, release chan struct{}
	t                *Topology
}

func (b *blockingDiscoverer) Discover() (*Topology, error) {
	close(b.entered)
	<-b.release
	return b.t, nil
}

// The reload metrics are Prometheus' own names: successful is 1 from the
// start, 0 after a refusal, 1 again (and the time moves) after an
// applied reload.
func TestReloadMetrics(t *testing.T) {
	fail := error(nil)
	a := reloadAgent(t, "backend: dry-run\nresources:\n  - name: vg1\n", twoPools(), &fail)
	ok := func() float64 { return testutil.ToFloat64(a.reloads.ok) }
	at0 := testutil.ToFloat64(a.reloads.at)
	if ok() != 1 || at0 <= 0 {
		t.Fatalf("at start: successful %v, timestamp %v", ok(), at0)
	}
	a.RecordReload(ErrNoResources)
	if ok() != 0 || testutil.ToFloat64(a.reloads.at) != at0 {
		t.Errorf("after a refusal: successful %v, timestamp moved %v", ok(), testutil.ToFloat64(a.reloads.at))
	}
	a.RecordReload(nil)
	if ok() != 1 || testutil.ToFloat64(a.reloads.at) < at0 {
		t.Errorf("after an applied reload: successful %v, timestamp %v", ok(), testutil.ToFloat64(a.reloads.at))
	}
	for _, name := range []string{"sanqos_config_last_reload_successful", "sanqos_config_last_reload_success_timestamp_seconds"} {
		if n, err := testutil.GatherAndCount(a.reg, name); err != nil || n != 1 {
			t.Errorf("%s: %d series (%v)", name, n, err)
		}
	}
}
