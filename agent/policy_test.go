package agent

import (
	"encoding/json"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/sample"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

var (
	c1 = netip.MustParseAddr("10.0.0.1")
	c2 = netip.MustParseAddr("10.0.0.2")
	c3 = netip.MustParseAddr("10.0.0.3")
	c4 = netip.MustParseAddr("10.0.0.4")
)

// ci builds a consumer's measurements: read and write MB/s, IOPS 10 per
// MB/s, waits in ms (NaN: none).
func ci(a netip.Addr, rMBs, wMBs, rWait, wWait float64) ConsumerInput {
	return ConsumerInput{Addr: a, HasDevices: true, ReadBps: rMBs * 1e6, WriteBps: wMBs * 1e6, WriteEWMA: wMBs * 1e6,
		ReadIOPS: rMBs * 10, WriteIOPS: wMBs * 10, ReadWaitMs: rWait, WriteWaitMs: wWait}
}

func input(out time.Duration, cs ...ConsumerInput) *PolicyInput {
	return &PolicyInput{Interval: time.Second, Output: out, DelayStep: 500 * time.Microsecond, MaxDelay: 2 * time.Millisecond,
		WriteBps: 1e6, IndicatorMs: 20, ThresholdMs: 15, Consumers: cs}
}

func TestReadOverWriteAndImportantSets(t *testing.T) {
	imp := ci(c1, 0, 20, math.NaN(), 5)
	imp.Important = true
	static := ConsumerInput{Addr: c4, Static: true, ReadWaitMs: math.NaN(), WriteWaitMs: math.NaN()}
	cs := []ConsumerInput{imp, ci(c2, 0, 20, math.NaN(), 5), ci(c3, 2, 0.5, 9, 5), static}
	for _, tc := range []struct {
		name      string
		p         Policy
		out       time.Duration
		wantSet   map[netip.Addr]throttle.Setting
		wantThr   []netip.Addr
		wantScope IndicatorScope
	}{
		{"below threshold", ReadOverWrite(), 0, map[netip.Addr]throttle.Setting{}, []netip.Addr{c2, c4}, IndicatorUnthrottled},
		{"saturated", ReadOverWrite(), 3 * time.Millisecond,
			map[netip.Addr]throttle.Setting{c2: {WriteDelay: 3 * time.Millisecond}, c4: {WriteDelay: 3 * time.Millisecond}}, []netip.Addr{c2, c4}, IndicatorUnthrottled},
		{"important-sets slows the same", ImportantSets(), time.Millisecond,
			map[netip.Addr]throttle.Setting{c2: {WriteDelay: time.Millisecond}, c4: {WriteDelay: time.Millisecond}}, []netip.Addr{c2, c4}, IndicatorImportant},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(tc.out, cs...)
			got := tc.p.Decide(in)
			var thr []netip.Addr
			for _, k := range got.Throttleable {
				thr = append(thr, cs[k].Addr)
			}
			if set := byAddr(in, got); !mapsEqual(set, tc.wantSet) || !slices.Equal(thr, tc.wantThr) {
				t.Fatalf("got %v %v, want %v %v", set, got.Throttleable, tc.wantSet, tc.wantThr)
			}
			if sc := tc.p.Indicator(); sc != tc.wantScope {
				t.Fatalf("indicator scope %v, want %v", sc, tc.wantScope)
			}
		})
	}
}

// byAddr is out's non-zero settings by the addresses of in's consumers,
// as the tests name them.
func byAddr(in *PolicyInput, out PolicyOutput) map[netip.Addr]throttle.Setting {
	m := map[netip.Addr]throttle.Setting{}
	for k, s := range out.Settings {
		if !s.IsZero() {
			m[in.Consumers[k].Addr] = s
		}
	}
	return m
}

// bySlot is m laid out as PolicyOutput.Settings for in's consumers.
func bySlot(in *PolicyInput, m map[netip.Addr]throttle.Setting) []throttle.Setting {
	s := make([]throttle.Setting, len(in.Consumers))
	for k, c := range in.Consumers {
		s[k] = m[c.Addr]
	}
	return s
}

func mapsEqual(a, b map[netip.Addr]throttle.Setting) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestWeighted(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		weights map[netip.Addr]float64
		out     time.Duration
		cs      []ConsumerInput
		want    map[netip.Addr]throttle.Setting
	}{
		// total 10 MB/s, weights 2:1:1 → shares 5, 2.5, 2.5. c1 is 20 %
		// above (0.2 × 4 ms = 0.8 → 1 ms in 0.5 ms steps), c2 20 % above,
		// c3 below: untouched.
		{"shares by weight", map[netip.Addr]float64{c1: 2}, 4 * ms,
			[]ConsumerInput{ci(c1, 0, 6, 0, 5), ci(c2, 0, 3, 0, 5), ci(c3, 0, 1, 0, 5)},
			map[netip.Addr]throttle.Setting{c1: {WriteDelay: ms}, c2: {WriteDelay: ms}}},
		{"not saturated: nobody", nil, 0,
			[]ConsumerInput{ci(c1, 0, 9, 0, 5), ci(c2, 0, 1, 0, 5)}, map[netip.Addr]throttle.Setting{}},
		// equal weights, 9 vs 1: share 5, c1 80 % above → 0.8 × 2 ms = 1.6
		// → 2 ms; a reader gets a read delay.
		{"reader gets a read delay", nil, 2 * ms,
			[]ConsumerInput{ci(c1, 9, 0, 5, 0), ci(c2, 0, 1, 0, 5)}, map[netip.Addr]throttle.Setting{c1: {ReadDelay: 2 * ms}}},
		// excess capped at 1: three times the share gets the whole output.
		{"capped at the output", nil, 1500 * time.Microsecond,
			[]ConsumerInput{ci(c1, 0, 10, 0, 5), ci(c2, 0, 0.5, 0, 5), ci(c3, 0, 0.5, 0, 5), ci(c4, 0, 0, 0, 0)},
			map[netip.Addr]throttle.Setting{c1: {WriteDelay: 1500 * time.Microsecond}}},
		{"important never", nil, 2 * ms,
			[]ConsumerInput{func() ConsumerInput { c := ci(c1, 0, 9, 0, 5); c.Important = true; return c }(), ci(c2, 0, 1, 0, 5)},
			map[netip.Addr]throttle.Setting{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(tc.out, tc.cs...)
			if got := byAddr(in, Weighted(tc.weights).Decide(in)); !mapsEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A delayed writer's 100 ms rates swing between nothing and a burst; on
// smoothed rates its delay stays on instead of toggling every tick.
func TestWeightedSmoothsBurstyRates(t *testing.T) {
	p := Weighted(nil)
	const out = 10 * time.Millisecond
	var off int
	for tick := 0; tick < 50; tick++ {
		// c1 averages 8 MB/s (0 and 16 alternately), c2 a steady 2: c1's
		// share is 5, so it is above it on average but below it every
		// other tick.
		x := 16.0
		if tick%2 == 1 {
			x = 0
		}
		in := input(out, ci(c1, 0, x, 0, 5), ci(c2, 0, 2, 0, 5))
		in.Interval = 100 * time.Millisecond
		got := byAddr(in, p.Decide(in))
		if tick >= 20 && got[c1].WriteDelay == 0 {
			off++
		}
		if got[c2].WriteDelay != 0 {
			t.Fatalf("tick %d: c2 below its share delayed %v", tick, got[c2])
		}
	}
	if off > 0 {
		t.Errorf("c1's delay was off in %d of 30 settled ticks", off)
	}
}

// TestDeviationFormulas checks seed 004's eq. (1) and (2) against its own
// tables: Table 2/3 (throughput, kb/s) and Table 5/6 (latency, ms).
func TestDeviationFormulas(t *testing.T) {
	for _, tc := range []struct {
		attained, expected, wantPct float64
	}{
		{19.4, 20, -3},            // Table 2 task: "negative deviation of 3%"
		{59.5, 60, -0.8333},       // knowledge: "0.8%"
		{99.8, 100, -0.2},         // power
		{300.16, 320, -6.2},       // Table 3 task, 64 KB: "6.2%"
		{919.55, 960, -4.2135},    // knowledge: "4.2%"
		{1540.03, 1600, -3.748},   // power: "3.7%"
		{263.13, 320, -17.771875}, // best effort task: "17%"
		{12, 10, 20},
	} {
		if got := ThroughputDeviationPct(tc.attained, tc.expected); math.Abs(got-tc.wantPct) > 0.001 {
			t.Errorf("ThroughputDeviationPct(%v, %v) = %v, want %v", tc.attained, tc.expected, got, tc.wantPct)
		}
	}
	if !math.IsNaN(ThroughputDeviationPct(5, 0)) {
		t.Error("no objective must give NaN")
	}
	for _, tc := range []struct{ observed, expected, want float64 }{
		{5.6, 6.4, -0.8}, {2.4, 3.2, -0.8}, {0.6, 1.3, -0.7}, // Table 5, proposed
		{7.7, 6.4, 1.3}, {5.4, 3.2, 2.2}, {2.6, 1.3, 1.3}, // Table 6, best effort
	} {
		if got := LatencyDeviation(tc.observed, tc.expected); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("LatencyDeviation(%v, %v) = %v, want %v", tc.observed, tc.expected, got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    []float64
		want float64
	}{
		{[]float64{1, 3, 2, math.NaN(), 6}, 7.0 / 3}, // |3−1| + |2−3| + |6−2|
		{[]float64{4, 4, 4}, 0},
		{[]float64{4}, math.NaN()},
		{nil, math.NaN()},
	} {
		got := Jitter(tc.s)
		if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-12) {
			t.Errorf("Jitter(%v) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// TestSLOCredits follows one class (1 MB/s floor, 2 s burst, 1 s ticks)
// banking credit below its objective, capped at the burst, and spending
// it above before it counts as exceeding.
func TestSLOCredits(t *testing.T) {
	p := rawSLO([]SLOClass{{Name: "task", Members: []netip.Addr{c1}, MBs: 1, Burst: 2 * time.Second}})
	for i, tc := range []struct {
		mbs        float64
		wantCredit float64
		wantExceed bool
	}{
		{0.5, 0.5, false},
		{0.5, 1.0, false},
		{0.5, 1.5, false},
		{0, 2, false}, // capped at burst
		{1, 2, false},
		{2, 1, false}, // spending: above but not exceeding
		{2.5, 0, true},
		{2, 0, true},
		{0.8, 0.2, false},
	} {
		got := p.Decide(input(0, ci(c1, tc.mbs, 0, 3, math.NaN()))).Classes[0]
		if math.Abs(got.CreditS-tc.wantCredit) > 1e-9 || got.Exceeding != tc.wantExceed {
			t.Fatalf("tick %d (%v MB/s): credit %v exceeding %v, want %v %v", i, tc.mbs, got.CreditS, got.Exceeding, tc.wantCredit, tc.wantExceed)
		}
	}
}

// TestSLOThrottleOrder: power misses its latency; best effort (no class)
// gives way first, then task (exceeding, low priority); knowledge, above
// its floor but with credit, is spared.
func TestSLOThrottleOrder(t *testing.T) {
	ms := time.Millisecond
	p := rawSLO([]SLOClass{
		{Name: "power", Members: []netip.Addr{c1}, Priority: 3, Latency: 2 * ms},
		{Name: "knowledge", Members: []netip.Addr{c2}, Priority: 2, MBs: 1, Burst: 100 * time.Second},
		{Name: "task", Members: []netip.Addr{c3}, Priority: 1, MBs: 1},
	})
	cs := []ConsumerInput{ci(c1, 1, 0, 5, math.NaN()), ci(c2, 2, 0, 5, math.NaN()), ci(c3, 0, 3, math.NaN(), 5), ci(c4, 0, 8, math.NaN(), 5)}
	// Knowledge idles first and banks 20 s of credit (power is fine then:
	// nobody is slowed).
	for i := 0; i < 20; i++ {
		idle := append([]ConsumerInput{ci(c1, 1, 0, 1, math.NaN()), ci(c2, 0, 0, math.NaN(), math.NaN())}, cs[2:]...)
		in := input(0, idle...)
		if out := byAddr(in, p.Decide(in)); len(out) != 0 {
			t.Fatalf("prelude tick %d: %v", i, out)
		}
	}
	type want struct{ best, task time.Duration }
	steps := []want{{ms / 2, 0}, {ms, 0}, {3 * ms / 2, 0}, {2 * ms, 0}, {2 * ms, ms / 2}, {2 * ms, ms}, {2 * ms, 3 * ms / 2}, {2 * ms, 2 * ms}, {2 * ms, 2 * ms}}
	for i, w := range steps {
		in := input(0, cs...)
		out := p.Decide(in)
		set := byAddr(in, out)
		if set[c4].WriteDelay != w.best || set[c3].WriteDelay != w.task {
			t.Fatalf("tick %d: best effort %v task %v, want %v %v", i, set[c4], set[c3], w.best, w.task)
		}
		if _, ok := set[c1]; ok {
			t.Fatalf("tick %d: the missing class was slowed", i)
		}
		if _, ok := set[c2]; ok {
			t.Fatalf("tick %d: knowledge has credit and must be spared", i)
		}
		if !out.Classes[0].Missing || !out.Classes[2].Exceeding || out.Classes[1].Exceeding {
			t.Fatalf("tick %d: classes %+v", i, out.Classes)
		}
	}
	// Power meets its objective again: the integrator releases a step per
	// tick, from the highest-priority exceeder down.
	cs[0] = ci(c1, 1, 0, 1, math.NaN())
	in := input(0, cs...)
	set := byAddr(in, p.Decide(in))
	if set[c3].WriteDelay != 3*ms/2 || set[c4].WriteDelay != 2*ms {
		t.Fatalf("release: %v", set)
	}
	// The controller's output is a floor for every exceeder.
	in = input(2*ms, cs...)
	if set = byAddr(in, p.Decide(in)); set[c3].WriteDelay != 2*ms {
		t.Fatalf("controller output ignored: %v", set)
	}
}

// TestSLOLifetimeMetrics: the status' means and deviations are over the
// class's life, I/O-weighted for latency.
func TestSLOLifetimeMetrics(t *testing.T) {
	p := rawSLO([]SLOClass{{Name: "power", Members: []netip.Addr{c1, c2}, MBs: 1.6, IOPS: 25, Latency: 1300 * time.Microsecond}})
	p.Decide(input(0, ci(c1, 1, 0, 1, math.NaN()), ci(c2, 0.5, 0, 2, math.NaN()))) // 1.5 MB/s, 15 IOPS, wait (10+10)/15 ≈ 1.333
	got := p.Decide(input(0, ci(c1, 1.7, 0, 1, math.NaN()))).Classes[0]            // 1.7 MB/s, 17 IOPS, wait 1
	// means: 1.6 MB/s, 16 IOPS, wait (15×4/3 + 17×1)/32 = 37/32
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"mean MB/s", float64(got.MeanMBs), 1.6},
		{"throughput deviation", float64(got.ThroughputDeviationPct), 0},
		{"iops deviation", float64(got.IOPSDeviationPct), (16.0 - 25) / 25 * 100},
		{"mean latency", float64(got.MeanLatencyMs), 37.0 / 32},
		{"latency deviation", float64(got.LatencyDeviationMs), 37.0/32 - 1.3},
		{"jitter", float64(got.JitterMs), 1.0 / 3},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestAgentRunsConfiguredPolicy drives the whole agent (config → spec →
// loop → actuator) with slo-classes: the best-effort reader gets a read
// delay in the throttle, the status carries the classes and encodes.
func TestAgentRunsConfiguredPolicy(t *testing.T) {
	cfg, err := config.Parse([]byte(`backend: dry-run
discovery: {source: static}
resources:
  - name: vg1
    devices: [loop0, loop1, loop2]
    policy: slo-classes
    classes:
      - name: power
        members: [10.99.0.4]
        latency: 1ms
`))
	if err != nil {
		t.Fatal(err)
	}
	mem := throttle.NewMemory()
	a := New(cfg, Deps{Throttle: mem, Sampler: &seqSampler{snaps: []map[string]sample.Counters{counters(1, 10), counters(2, 10), counters(3, 10), counters(4, 10)}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewController: func(*config.Config, config.Resource) Controller { return &propCtl{thr: 1000} }, // never saturated
		NewSmoother:   func(float64) Smoother { return &lastValue{} }})
	// boss (power) shares loop0 with the reader, whose reads wait 10 ms:
	// power misses its 1 ms objective; reader and writer are best effort.
	a.SetTopology(&Topology{Resources: map[string]ResourceView{"vg1": {
		Devices:   []string{"loop0", "loop1", "loop2"},
		Consumers: map[netip.Addr][]string{reader: {"loop0"}, writer: {"loop1"}, boss: {"loop0", "loop2"}},
	}}})
	for i := 0; i < 4; i++ {
		if err := a.Step(time.Unix(int64(i), 0)); err != nil {
			t.Fatal(err)
		}
	}
	st := a.Resources()[0]
	if st.Policy != "slo-classes" || len(st.Classes) != 1 || !st.Classes[0].Missing {
		t.Fatalf("status %+v", st)
	}
	got := mem.List()
	if got[reader].ReadDelay == 0 || got[writer].WriteDelay == 0 || !got[boss].IsZero() {
		t.Fatalf("throttles %v", got)
	}
	if _, err := json.Marshal(a.Status()); err != nil {
		t.Fatal(err)
	}
}

// rawSLO is the slo-classes policy without decision smoothing, so tests
// can follow it tick by tick.
func rawSLO(cls []SLOClass) Policy {
	p := SLOClasses(cls).(*sloPolicy)
	p.smoothing = 0
	return p
}
