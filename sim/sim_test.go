package sim

import (
	"bytes"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

func TestJobSchedule(t *testing.T) {
	s := time.Second
	j := &Job{Start: 2 * s, Length: 3 * s, Off: s, Until: 10 * s}
	once := &Job{Start: s, Length: s}
	always := &Job{}
	for _, tc := range []struct {
		name   string
		j      *Job
		at     time.Duration
		active bool
		next   time.Duration
	}{
		{"before start", j, s, false, 2 * s},
		{"first on", j, 2 * s, true, 2 * s},
		{"end of on is off", j, 5 * s, false, 6 * s},
		{"second on", j, 7 * s, true, 7 * s},
		{"third on", j, 8*s + s/2, true, 8*s + s/2},
		{"next on would start at Until", j, 9*s + s/2, false, -1},
		{"after Until", j, 10 * s, false, -1},
		{"off period whose next on is past Until", &Job{Start: 0, Length: s, Off: s, Until: 2 * s}, s, false, -1},
		{"once, during", once, s + s/2, true, s + s/2},
		{"once, after", once, 2 * s, false, -1},
		{"always", always, 100 * s, true, 100 * s},
	} {
		if got := tc.j.active(tc.at); got != tc.active {
			t.Errorf("%s: active(%v) = %v", tc.name, tc.at, got)
		}
		if got := tc.j.nextActive(tc.at); got != tc.next {
			t.Errorf("%s: nextActive(%v) = %v, want %v", tc.name, tc.at, got, tc.next)
		}
	}
}

func TestServiceAndTransfer(t *testing.T) {
	p := Params{Overhead: 200 * time.Microsecond, Seek: 5 * time.Millisecond, BandwidthBps: 40e6, WriteCost: 2,
		RTT: 100 * time.Microsecond, ReadNetBps: 100e6, WriteNetBps: 50e6, ReadWindow: 65536, WriteWindow: 16384}
	for _, tc := range []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"random 8 KiB read seeks", p.service(false, false, 8192), 200*time.Microsecond + 5*time.Millisecond + 204800},
		{"sequential 64 KiB write pays the write cost", p.service(true, true, 65536), 200*time.Microsecond + 2*1638400},
		{"read data, no delay", p.transfer(false, 65536, 0), 100*time.Microsecond + 655360},
		{"read data, one window: one delay", p.transfer(false, 65536, 3*time.Millisecond), 100*time.Microsecond + 655360 + 3*time.Millisecond},
		{"write data, four windows: four delays", p.transfer(true, 65536, time.Millisecond), 100*time.Microsecond + 1310720 + 4*time.Millisecond},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// The sampler's counters are cumulative and consistent: ticks in whole
// ms, sectors of 512 bytes, nothing in flight once the jobs stop.
func TestSamplerCounters(t *testing.T) {
	j := []*Job{
		{Consumer: HostAddr("b2"), Device: "loop0", Random: true, BS: 8192, IODepth: 1, RateBps: 256 << 10, Length: 2 * time.Second},
		{Consumer: HostAddr("b3"), Device: "loop1", Write: true, BS: 65536, IODepth: 2, Length: 2 * time.Second},
	}
	m := NewModel(DefaultParams(), 1, []Resource{{Name: "vg1", Devices: Devices}}, j)
	m.RunUntil(time.Second)
	a, _ := m.Read()
	m.RunUntil(3 * time.Second)
	b, _ := m.Read("loop0", "loop1")
	if len(b) != 2 {
		t.Fatalf("Read(names) returned %d devices", len(b))
	}
	r, w := b["loop0"], b["loop1"]
	if r.Reads < 60 || r.Reads > 66 || r.ReadSectors != r.Reads*16 {
		t.Errorf("reader: %d reads, %d sectors (256 KiB/s of 8 KiB for 2 s)", r.Reads, r.ReadSectors)
	}
	if per := float64(r.ReadTicks) / float64(r.Reads); per < 6 || per > 15 {
		t.Errorf("reader's wait %.2f ms, want the random-read service (~6 ms) plus part of a write ahead of it", per)
	}
	if w.Writes == 0 || w.WriteSectors != w.Writes*128 || w.InFlight != 0 || r.InFlight != 0 {
		t.Errorf("writer %+v", w)
	}
	if !b["loop0"].Time.After(a["loop0"].Time) || a["loop0"].Reads > r.Reads {
		t.Errorf("counters not cumulative: %+v then %+v", a["loop0"], r)
	}
}

func TestThrottleIsAllOrNothing(t *testing.T) {
	th := NewThrottle()
	ok, bad := HostAddr("b3"), HostAddr("b4")
	err := th.Set(map[netip.Addr]throttle.Setting{ok: {WriteDelay: time.Millisecond}, bad: {WriteDelay: 200 * time.Millisecond}})
	if err == nil || len(th.List()) != 0 {
		t.Fatalf("a 200 ms delay must be refused and nothing applied: %v, %v", err, th.List())
	}
	if err := th.Set(map[netip.Addr]throttle.Setting{ok: {WriteDelay: time.Millisecond}}); err != nil || th.get(ok).WriteDelay != time.Millisecond {
		t.Fatal(err)
	}
	th.SetDirect(ok, throttle.Setting{})
	if len(th.List()) != 0 {
		t.Fatal("zero setting must clear")
	}
}

// Same seed, same bytes; another seed, another run.
func TestDeterministicSummary(t *testing.T) {
	run := func(seed uint64) []byte {
		o := DefaultOptions()
		o.Seed, o.Scale = seed, 0.25
		s, err := Run("autonomic", o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := MarshalSummary(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := run(3), run(3), run(4)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed gave different summaries")
	}
	if bytes.Equal(a, c) {
		t.Fatal("different seeds gave identical summaries: the seed is not used")
	}
}

// Fig 5.5/5.6: time per request grows linearly with the delay, so the
// rate falls close to linearly over 0–10 ms, writes more steeply.
func TestDelaySweepShape(t *testing.T) {
	o := DefaultOptions()
	o.Scale = 0.25
	v, err := Run("delay-sweep", o)
	if err != nil {
		t.Fatal(err)
	}
	s := v.(SweepSummary)
	for _, dir := range []string{"read", "write"} {
		var xs, ys []float64
		for _, p := range s.Points {
			if p.Direction == dir {
				xs, ys = append(xs, p.DelayMs), append(ys, 65536/(p.MBs*1e6))
			}
		}
		if _, _, r := report.LinearFit(xs, ys); r < 0.99 {
			t.Errorf("%s: time per request vs delay r² %.3f, want ≥ 0.99", dir, r)
		}
	}
	if s.Ratio["write"] >= s.Ratio["read"] || s.Ratio["write"] > 0.25 {
		t.Errorf("ratios at 9.6 ms %v: writes must fall further than reads (lab: 0.13 vs 0.20)", s.Ratio)
	}
}

// Fig 5.7: the reader's wait rises with the number of writers.
func TestInterferenceShape(t *testing.T) {
	o := DefaultOptions()
	o.Scale = 0.25
	v, err := Run("interference", o)
	if err != nil {
		t.Fatal(err)
	}
	s := v.(report.InterferenceSummary)
	for i := 1; i < len(s.Runs); i++ {
		if s.Runs[i].ReadWaitMs.P95 <= s.Runs[i-1].ReadWaitMs.P95 {
			t.Errorf("p95 with %d writers (%v) not above %d writers' (%v)", s.Runs[i].Writers, s.Runs[i].ReadWaitMs.P95, s.Runs[i-1].Writers, s.Runs[i-1].ReadWaitMs.P95)
		}
	}
	if s.P95Ratio12 < 4 {
		t.Errorf("12 writers vs none: p95 ratio %v, lab 7.1", s.P95Ratio12)
	}
}

// Fig 5.11–5.13: with only a threshold, the agent finds the writers and
// holds the reader's wait near each threshold, far below the baseline,
// keeping most of the writers' throughput.
func TestAutonomicReproducesFig511(t *testing.T) {
	o := DefaultOptions()
	o.Scale = 0.25
	v, err := Run("autonomic", o)
	if err != nil {
		t.Fatal(err)
	}
	s := v.(report.ControlledSummary)
	if len(s.Regulated) != 3 {
		t.Fatalf("%d regulated runs", len(s.Regulated))
	}
	for _, r := range s.Regulated {
		// The default objective (p95) holds p95 at the threshold, so it
		// may land a little under it; the thesis' mean overshot.
		if p := r.ReadWaitMs.P95; p < 0.9*r.ThresholdMs || p > 1.5*r.ThresholdMs {
			t.Errorf("threshold %v: p95 %v, want within [0.9, 1.5] × threshold (lab, objective p95: 1.31, 1.12, 1.04)", r.ThresholdMs, p)
		}
		if s.Baseline.ReadWaitMs.P95 < 1.5*r.ReadWaitMs.P95 {
			t.Errorf("threshold %v: p95 %v not well below the baseline's %v", r.ThresholdMs, r.ReadWaitMs.P95, s.Baseline.ReadWaitMs.P95)
		}
		if kept := r.WriteMBs / s.Baseline.WriteMBs; kept < 0.7 {
			t.Errorf("threshold %v: writes kept %.0f%%, lab 84–94%%", r.ThresholdMs, 100*kept)
		}
		if r.MaxDelay == 0 || r.Throttled == 0 {
			t.Errorf("threshold %v: never throttled (%+v)", r.ThresholdMs, r)
		}
	}
}

// Calibrating against the simulator's own output recovers the TCP windows
// it ran with.
func TestCalibrateRecoversWindows(t *testing.T) {
	truth := DefaultParams()
	truth.ReadWindow, truth.WriteWindow = 50000, 25000
	o := DefaultOptions()
	o.Params, o.Scale = truth, 0.25
	sw, err := Run("delay-sweep", o)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Run("interference", o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Calibrate(&LabRuns{Sweep: sw.(SweepSummary), Interference: in.(report.InterferenceSummary)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		name      string
		got, want float64
	}{{"read window", c.Params.ReadWindow, truth.ReadWindow}, {"write window", c.Params.WriteWindow, truth.WriteWindow}} {
		if math.Abs(x.got-x.want)/x.want > 0.05 {
			t.Errorf("%s %.0f, want %.0f ± 5%%", x.name, x.got, x.want)
		}
	}
	if c.InterferenceErrPct > 10 {
		t.Errorf("self-calibration p95 error %v%%", c.InterferenceErrPct)
	}
}

func TestScaleSmall(t *testing.T) {
	so := DefaultScale()
	so.Resources, so.Length = 20, 3*time.Second
	s, err := RunScale(so)
	if err != nil {
		t.Fatal(err)
	}
	if s.Consumers != 200 || s.LateWritersDetected != s.LateWriters {
		t.Fatalf("detected %d of %d late writers", s.LateWritersDetected, s.LateWriters)
	}
	// Discovery runs every second; once a writer is discovered, the
	// write-rate EWMA (α 0.5) crosses 1 MB/s within a few ticks.
	if s.TimeToThrottleableMs.Max > 1500 || s.FromDiscoveryMs.Max > 500 {
		t.Errorf("time to throttleable max %v ms (from discovery %v ms)", s.TimeToThrottleableMs.Max, s.FromDiscoveryMs.Max)
	}
	if s.SaturatedResources == 0 || s.ThrottleChanges == 0 {
		t.Errorf("no resource throttled: %+v", s)
	}
}

func TestTuneRanksCandidates(t *testing.T) {
	to := DefaultTune()
	to.Scale, to.Kp, to.Ti = 0.25, []float64{0.05, 0.8}, []time.Duration{200 * time.Millisecond, 20 * time.Second}
	r, err := Tune(to)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Ranked) != 4 {
		t.Fatalf("%d candidates", len(r.Ranked))
	}
	// A near-zero gain with a 20 s integral time barely reacts: it must
	// rank last.
	if last := r.Ranked[3]; last.Kp != 0.05 || last.Ti != 20*time.Second {
		t.Errorf("weakest gains ranked %+v, not last", last)
	}
}

// BenchmarkAutonomic reports how much faster than real time the autonomic
// scenario (baseline + three thresholds, thesis durations) runs.
func BenchmarkAutonomic(b *testing.B) {
	o := DefaultOptions()
	for i := 0; i < b.N; i++ {
		s0, t0 := Simulated(), time.Now()
		if _, err := Run("autonomic", o); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric((Simulated()-s0).Seconds()/time.Since(t0).Seconds(), "x-realtime")
	}
}

// With a write-back cache a lone writer's writes complete at the
// controller's overhead while the cache has room, and the destaging still
// occupies the disk, so a reader still waits behind it; once the cache is
// full writes wait like uncached ones.
func TestWriteCache(t *testing.T) {
	run := func(cache int64, rate float64) (writeMs, readMs float64) {
		p := DefaultParams()
		p.WriteCacheBytes, p.Jitter = cache, 0
		jobs := []*Job{
			{Consumer: HostAddr("b2"), Device: "loop0", Random: true, BS: 8192, IODepth: 1, RateBps: 256 << 10},
			{Consumer: HostAddr("b3"), Device: "loop1", Write: true, BS: 65536, IODepth: 2, RateBps: rate},
		}
		m := NewModel(p, 1, []Resource{{Name: "vg1", Devices: Devices}}, jobs)
		m.RunUntil(10 * time.Second)
		c, _ := m.Read()
		w, r := c["loop1"], c["loop0"]
		return float64(w.WriteTicks) / float64(w.Writes), float64(r.ReadTicks) / float64(r.Reads)
	}
	noW, noR := run(0, 4e6)
	bigW, bigR := run(64<<20, 4e6)
	if !(bigW < 1 && noW > 3) {
		t.Errorf("write wait: %.2f ms cached vs %.2f ms uncached, want < 1 (cache acknowledges) and > 3", bigW, noW)
	}
	if bigR < 0.8*noR {
		t.Errorf("read wait %.2f ms with a cache vs %.2f ms without: destaging must still load the disk", bigR, noR)
	}
	// An unthrottled writer outruns the disk: the cache fills and its
	// writes wait for destaging.
	fullW, _ := run(1<<20, 0)
	if fullW < 0.5*noW {
		t.Errorf("a one-write cache kept writes at %.2f ms (uncached %.2f ms)", fullW, noW)
	}
}

// The TCP rate sampler reports what crossed the wire per consumer.
func TestWireRates(t *testing.T) {
	jobs := []*Job{
		{Consumer: HostAddr("b2"), Device: "loop0", Random: true, BS: 8192, IODepth: 1, RateBps: 256 << 10},
		{Consumer: HostAddr("b3"), Device: "loop1", Write: true, BS: 65536, IODepth: 1, RateBps: 2e6},
	}
	m := NewModel(DefaultParams(), 1, []Resource{{Name: "vg1", Devices: Devices}}, jobs)
	m.RunUntil(time.Second)
	m.Sample()
	m.RunUntil(5 * time.Second)
	r, _ := m.Sample()
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"reader's reads", r[HostAddr("b2")].ReadBps, 256 << 10},
		{"writer's writes", r[HostAddr("b3")].WriteBps, 2e6},
	} {
		if math.Abs(tc.got-tc.want)/tc.want > 0.05 {
			t.Errorf("%s: %.0f B/s, want %.0f ± 5%%", tc.name, tc.got, tc.want)
		}
	}
	if r[HostAddr("b2")].WriteBps != 0 || r[HostAddr("b3")].ReadBps != 0 {
		t.Errorf("cross-talk: %+v", r)
	}
}
