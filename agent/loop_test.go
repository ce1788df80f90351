package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// propCtl is a stand-in controller for testing the wiring: one step per
// millisecond above the threshold.
type propCtl struct{ thr float64 }

func (p *propCtl) Update(m float64) int {
	if math.IsNaN(m) {
		return 0
	}
	return max(0, int(math.Ceil(m-p.thr)))
}
func (p *propCtl) Reset() {}

// lastValue is an identity smoother (no filtering) for deterministic tests.
type lastValue struct {
	v  float64
	ok bool
}

func (s *lastValue) Update(x float64) (float64, bool) { s.v, s.ok = x, true; return x, true }
func (s *lastValue) Value() (float64, bool)           { return s.v, s.ok }

var (
	reader = netip.MustParseAddr("10.99.0.2")
	writer = netip.MustParseAddr("10.99.0.3")
	boss   = netip.MustParseAddr("10.99.0.4")
)

func testLoops(t *testing.T) (*Loops, *throttle.Memory) {
	mem := throttle.NewMemory()
	l := NewLoops(LoopConfig{Interval: 100 * time.Millisecond, DelayStep: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond,
		WriteBps: 1e6, Cost: cost.Default(), NewRateSmoother: func() Smoother { return &lastValue{} }}, nil, mem, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l.SetTopology(&Topology{Resources: map[string]ResourceView{"vg1": {
		Devices:   []string{"loop0", "loop1", "loop2"},
		Consumers: map[netip.Addr][]string{reader: {"loop0"}, writer: {"loop1"}, boss: {"loop2"}},
	}}})
	l.SetSpecs(map[string]ResourceSpec{"vg1": {Name: "vg1", Threshold: 15 * time.Millisecond, Important: map[netip.Addr]bool{boss: true},
		NewController: func() Controller { return &propCtl{thr: 15} }, NewSmoother: func() Smoother { return &lastValue{} }}})
	return l, mem
}

// counters builds a diskstats snapshot: reader reads with the given wait,
// writer and boss write at 20 MB/s.
func counters(tick int, readWaitMs float64) map[string]sample.Counters {
	t := time.Unix(0, 0).Add(time.Duration(tick) * 100 * time.Millisecond)
	n := uint64(tick)
	return map[string]sample.Counters{
		"loop0": {Device: "loop0", Time: t, Reads: 4 * n, ReadTicks: uint64(4 * readWaitMs * float64(tick)), ReadSectors: 64 * n},
		"loop1": {Device: "loop1", Time: t, Writes: 30 * n, WriteSectors: 3900 * n},
		"loop2": {Device: "loop2", Time: t, Writes: 30 * n, WriteSectors: 3900 * n},
	}
}

// TestStepThrottlesWritersNotImportant: while the reader's wait is
// above the threshold the writer, and only the writer, gets the
// controller's delay, in the direction it loads the resource (it writes
// and reads nothing); the boss, which writes as much but is important,
// and the reader never get any; the delay follows the controller down
// and is gone the tick the wait falls back below the threshold, and
// Release clears everything. Run with testLoops' zero cost
// model, which prices nothing (directed falls back to the direction that
// moves more bytes), and with the agent's, cost.Default().
// It is long for its table of ticks, which run in order through one
// Loops, each tick's state the next one's premise.
func TestStepThrottlesWritersNotImportant(t *testing.T) {
	ms := time.Millisecond
	write := func(d time.Duration) throttle.Setting { return throttle.Setting{WriteDelay: d} }
	for _, m := range []struct {
		name string
		cost cost.Model
		// pinned is the writer's setting with the controller pinned at
		// max_delay and the threshold missed: the agent's model slows the
		// other direction too (directed, issue 30), its read delay
		// starting at readRiseStep (the rise limit's first tick).
		pinned throttle.Setting
	}{
		{"zero cost model", cost.Model{}, write(20 * ms)},
		{"default cost model", cost.Default(), throttle.Setting{ReadDelay: readRiseStep, WriteDelay: 20 * ms}},
	} {
		t.Run(m.name, func(t *testing.T) {
			l, mem := testLoops(t)
			l.cfg.Cost = m.cost
			ss := &seqSampler{}
			l.sampler = ss
			// counters() takes the mean read wait since tick 0; propCtl
			// gives one 0.5 ms step per ms of wait above the 15 ms
			// threshold.
			for i, tc := range []struct {
				name   string
				mean   float64          // counters()'s argument
				writer throttle.Setting // the writer's setting wanted
				pinned bool             // m.pinned instead
			}{
				{"first sample: baseline only", 10, throttle.Setting{}, false},
				{"below threshold (10 ms)", 10, throttle.Setting{}, false},
				{"load: 55 ms, 40 steps, pinned at max_delay", 25, throttle.Setting{}, true},
				{"load eases: 25 ms, 10 steps", 25, write(5 * ms), false},
				{"load gone: 5 ms", 21, throttle.Setting{}, false},
			} {
				if tc.pinned {
					tc.writer = m.pinned
				}
				ss.snaps = append(ss.snaps, counters(i+1, tc.mean))
				if err := l.Step(time.Unix(0, int64(i+1)*1e8)); err != nil {
					t.Fatal(err)
				}
				st, applied := l.Status()[0], mem.List()
				if s, ok := applied[boss]; ok {
					t.Fatalf("%s: important consumer throttled: %+v", tc.name, s)
				}
				if s, ok := applied[reader]; ok {
					t.Fatalf("%s: reader (not writing) throttled: %+v", tc.name, s)
				}
				got, ok := applied[writer]
				if got != tc.writer || ok == tc.writer.IsZero() || len(applied) > 1 {
					t.Fatalf("%s: writer got %+v (all: %v), want %+v (controller: step %d, delay %v) and nobody else slowed",
						tc.name, got, applied, tc.writer, st.Step, st.Delay)
				}
				if !tc.writer.IsZero() && st.Delay != max(tc.writer.ReadDelay, tc.writer.WriteDelay) {
					t.Fatalf("%s: writer asked %+v, controller's delay %v", tc.name, tc.writer, st.Delay)
				}
				if i == 2 && (st.Step == 0 || len(st.Throttleable) != 1 || st.Throttleable[0] != writer.String()) {
					t.Fatalf("status %+v", st)
				}
				for _, c := range st.Consumers {
					want := throttle.Setting{}
					if c.Addr == writer.String() {
						want = tc.writer
					}
					if c.Setting != want || c.Throttled != !want.IsZero() {
						t.Errorf("%s: status shows %s throttled %v with %+v, want %+v", tc.name, c.Addr, c.Throttled, c.Setting, want)
					}
				}
			}
			l.Release()
			if left := mem.List(); len(left) != 0 {
				t.Fatalf("Release left throttles: %v", left)
			}
		})
	}
}

func TestReloadRefusesRestartOnlyChanges(t *testing.T) {
	cfg, err := config.Parse([]byte("backend: dry-run\nresources:\n  - name: vg1\n    devices: [loop0]\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := New(cfg, Deps{Throttle: throttle.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewController: func(*config.Config, config.Resource) Controller { return &propCtl{} },
		NewSmoother:   func(float64) Smoother { return &lastValue{} }})
	for _, bad := range []string{
		"backend: delayline\nresources:\n  - name: vg1\n",
		"backend: dry-run\ninterval: 50ms\nresources:\n  - name: vg1\n",
		"backend: dry-run\nsocket: /tmp/other.sock\nresources:\n  - name: vg1\n",
		"backend: dry-run\ndevice: eth9\nresources:\n  - name: vg1\n",
		"backend: dry-run\nidle_hold: 0s\nresources:\n  - name: vg1\n",
		"backend: dry-run\nonset_feedforward: false\nresources:\n  - name: vg1\n",
		"backend: dry-run\nthrottleable_write_mb_s: 5\nresources:\n  - name: vg1\n",
		"backend: dry-run\nthrottleable_queue: 2\nresources:\n  - name: vg1\n",
		"backend: dry-run\nthrottleable_read_mb_s: 5\nresources:\n  - name: vg1\n",
	} {
		nc, err := config.Parse([]byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Reload(nc); err == nil {
			t.Errorf("reload accepted a restart-only change:\n%s", bad)
		}
	}
	if th := a.loops.gen.Load().specs["vg1"].Threshold; th != 15*time.Millisecond {
		t.Fatalf("refused reload changed the active config: threshold %v", th)
	}
	nc, _ := config.Parse([]byte("backend: dry-run\nresources:\n  - name: vg1\n    threshold: 10ms\n  - name: vg2\n"))
	if err := a.Reload(nc); err != nil {
		t.Fatal(err)
	}
	specs := a.loops.gen.Load().specs
	if specs["vg1"].Threshold != 10*time.Millisecond || len(specs) != 2 {
		t.Fatalf("reload not applied: %+v", specs)
	}
}

// seqSampler hands out one prepared snapshot per Read.
type seqSampler struct {
	snaps []map[string]sample.Counters
	i     int
}

func (s *seqSampler) Read(...string) (map[string]sample.Counters, error) {
	c := s.snaps[min(s.i, len(s.snaps)-1)]
	s.i++
	return c, nil
}

// A republished but unchanged topology keeps the compiled plan (and the
// consumers' rate history); a changed one recompiles it, and a consumer
// that left disappears from status and from the rate history.
func TestStepRecompilesOnlyChangedTopology(t *testing.T) {
	l, _ := testLoops(t)
	ss := &seqSampler{}
	for i := 1; i <= 4; i++ {
		ss.snaps = append(ss.snaps, counters(i, 10))
	}
	l.sampler = ss
	view := func(withWriter bool) *Topology {
		v := ResourceView{Devices: []string{"loop0", "loop1", "loop2"}, Consumers: map[netip.Addr][]string{reader: {"loop0"}, boss: {"loop2"}}}
		if withWriter {
			v.Consumers[writer] = []string{"loop1"}
		}
		return &Topology{Resources: map[string]ResourceView{"vg1": v}}
	}
	for i, tc := range []struct {
		name      string
		topo      *Topology
		recompile bool
		consumers int
	}{
		{"first tick compiles", view(true), true, 3},
		{"same content, new pointer: kept", view(true), false, 3},
		{"writer left: recompiled", view(false), true, 2},
		{"writer back: recompiled", view(true), true, 3},
	} {
		var before *plan
		if rs := l.states["vg1"]; rs != nil {
			before = rs.plan
		}
		l.SetTopology(tc.topo)
		if err := l.Step(time.Unix(0, int64(i+1)*1e8)); err != nil {
			t.Fatal(err)
		}
		rs := l.states["vg1"]
		if got := rs.plan != before; got != tc.recompile {
			t.Errorf("%s: recompiled %v, want %v", tc.name, got, tc.recompile)
		}
		if st := l.Status()[0]; len(st.Consumers) != tc.consumers || len(rs.plan.rates) != tc.consumers {
			t.Errorf("%s: %d consumers in status, %d rate histories, want %d", tc.name, len(st.Consumers), len(rs.plan.rates), tc.consumers)
		}
	}
}

func TestRiseLimit(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name                  string
		prev, want, step, got time.Duration
	}{
		{"from zero: step only", 0, 12 * ms, 2 * ms, 2 * ms},
		{"doubles plus step", 2 * ms, 12 * ms, 2 * ms, 6 * ms},
		{"within bound: as asked", 6 * ms, 10 * ms, 2 * ms, 10 * ms},
		{"decrease unlimited", 20 * ms, 1 * ms, 2 * ms, 1 * ms},
		{"release unlimited", 20 * ms, 0, 2 * ms, 0},
		{"no bound", 0, 20 * ms, 0, 20 * ms},
	} {
		if got := riseLimit(tc.prev, tc.want, tc.step); got != tc.got {
			t.Errorf("%s: riseLimit(%v, %v, %v) = %v, want %v", tc.name, tc.prev, tc.want, tc.step, got, tc.got)
		}
	}
}

// A jump in the controller's output reaches the writer over several ticks
// (0 → 2 → 6 → 14 → … ms with a 2 ms rise step), and falls at once.
func TestStepLimitsDelayRise(t *testing.T) {
	l, mem := testLoops(t)
	l.cfg.RiseStep = 2 * time.Millisecond
	// 15 ms threshold, propCtl: one 0.5 ms step per ms above: 45 ms → 30
	// steps = 15 ms wanted at once.
	waits := []float64{10, 10, 45, 45, 45, 45, 45, 5}
	ss := &seqSampler{}
	var cum float64 // counters() takes the mean wait since tick 0
	for i, w := range waits {
		cum += w
		ss.snaps = append(ss.snaps, counters(i+1, cum/float64(i+1)))
	}
	l.sampler = ss
	var got []time.Duration
	for i := range waits {
		if err := l.Step(time.Unix(0, 0).Add(time.Duration(i+1) * 100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		got = append(got, mem.List()[writer].WriteDelay)
	}
	ms := time.Millisecond
	want := []time.Duration{0, 0, 2 * ms, 6 * ms, 14 * ms, 15 * ms, 15 * ms, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("writer's delay per tick = %v, want %v", got, want)
		}
	}
}

type countingDiscoverer chan struct{}

func (c countingDiscoverer) Discover() (*Topology, error) {
	c <- struct{}{}
	return &Topology{Resources: map[string]ResourceView{}}, nil
}

type watchedRates chan struct{}

func (watchedRates) Sample() (map[netip.Addr]sample.Rate, error) { return nil, nil }
func (w watchedRates) ConnChanges() <-chan struct{}              { return w }

// With a connection watcher, discovery runs at start, then only on a
// connection change (at once and one interval later), not every interval.
func TestDiscoveryRunsOnConnectionChange(t *testing.T) {
	cfg, err := config.Parse([]byte("backend: dry-run\ndiscovery:\n  interval: 100ms\n  refresh: 10m\nresources:\n  - name: vg1\n    devices: [loop0]\n"))
	if err != nil {
		t.Fatal(err)
	}
	calls, changes := make(countingDiscoverer, 10), make(watchedRates, 1)
	a := New(cfg, Deps{Throttle: throttle.NewMemory(), Rates: changes, Discoverer: calls, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewController: func(*config.Config, config.Resource) Controller { return &propCtl{} },
		NewSmoother:   func(float64) Smoother { return &lastValue{} }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.discoverLoop(ctx)
	<-calls // at start
	// Five intervals without a change: no rediscovery. (A bounded wait can
	// only miss a bug, never fail a correct loop.)
	select {
	case <-calls:
		t.Fatal("rediscovered without a connection change")
	case <-time.After(5 * cfg.Discovery.Interval):
	}
	changes <- struct{}{}
	<-calls // at once
	<-calls // and once more an interval later
	select {
	case <-calls:
		t.Fatal("kept rediscovering after the change settled")
	case <-time.After(5 * cfg.Discovery.Interval):
	}
}

// A bridge-mode agent watches its capture interface from the start: a
// reload naming another one is refused, not silently half-applied.
func TestReloadRefusesCaptureInterfaceChange(t *testing.T) {
	const base = "backend: dry-run\nmode: bridge\ncapture_interface: %s\nresources:\n  - name: vg1\n    portals: [\"10.0.0.1:3260\"]\n"
	cfg, err := config.Parse([]byte(fmt.Sprintf(base, "eth1")))
	if err != nil {
		t.Fatal(err)
	}
	a := New(cfg, Deps{Throttle: throttle.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewController: func(*config.Config, config.Resource) Controller { return &propCtl{} },
		NewSmoother:   func(float64) Smoother { return &lastValue{} }})
	nc, err := config.Parse([]byte(fmt.Sprintf(base, "eth9")))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(nc); err == nil || !strings.Contains(err.Error(), "capture_interface") {
		t.Errorf("reload to another capture interface: %v, want refused naming capture_interface", err)
	}
	if a.cfg.CaptureInterface != "eth1" {
		t.Errorf("refused reload changed the capture interface to %q", a.cfg.CaptureInterface)
	}
}
