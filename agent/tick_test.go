package agent

import (
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// The tick's stages one by one, on recorded lab inputs: five seconds of
// two unregulated lab runs (testdata/stages), each host on its own LUN
// (b2 the reader on loop0, b3..b5 the interferers on loop1..loop3):
// read-backup (three hosts reading 64 KiB sequentially, 4 streams each,
// from 5.0 s) and autonomic (the thesis' twelve 64 KiB writers, from
// 5.4 s).

var (
	stageHosts = []string{"b2", "b3", "b4", "b5"}
	stageAddr  = map[string]netip.Addr{}
)

func init() {
	for i, h := range stageHosts {
		stageAddr[h] = netip.AddrFrom4([4]byte{10, 99, 0, byte(2 + i)})
	}
}

// recordedTick is one 100 ms row per host of a lab trace.
type recordedTick struct {
	t   float64
	dev map[string]sample.Interval // by device
}

// loadRecorded reads a trace.csv cut (lab/trace.go's format).
func loadRecorded(t *testing.T, path string) []recordedTick {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	num := func(r []string, c string) float64 {
		if r[col[c]] == "" {
			return math.NaN()
		}
		v, err := strconv.ParseFloat(r[col[c]], 64)
		if err != nil {
			t.Fatalf("%s: %s %q: %v", path, c, r[col[c]], err)
		}
		return v
	}
	var ticks []recordedTick
	for _, r := range rows[1:] {
		ts := num(r, "t_s")
		// Rows of one tick share its time to the millisecond.
		if len(ticks) == 0 || math.Abs(ticks[len(ticks)-1].t-ts) > 0.05 {
			ticks = append(ticks, recordedTick{t: ts, dev: map[string]sample.Interval{}})
		}
		ticks[len(ticks)-1].dev[r[col["device"]]] = sample.Interval{Device: r[col["device"]], Seconds: 0.1,
			Reads: uint64(num(r, "reads")), Writes: uint64(num(r, "writes")), ReadWaitMs: num(r, "r_await_ms"), WriteWaitMs: num(r, "w_await_ms"),
			ReadBps: num(r, "read_mb_s") * 1e6, WriteBps: num(r, "write_mb_s") * 1e6, InFlight: uint64(num(r, "inflight"))}
	}
	return ticks
}

// cumulative turns recorded intervals into the diskstats counters a
// sampler would have read, tick by tick.
func cumulative(ticks []recordedTick) []map[string]sample.Counters {
	cum := map[string]sample.Counters{}
	epoch := time.Unix(1e9, 0)
	var out []map[string]sample.Counters
	for _, tk := range ticks {
		snap := map[string]sample.Counters{}
		for d, iv := range tk.dev {
			c := cum[d]
			c.Device, c.Time = d, epoch.Add(time.Duration(tk.t*float64(time.Second)))
			c.Reads += iv.Reads
			c.Writes += iv.Writes
			if iv.Reads > 0 {
				c.ReadTicks += uint64(math.Round(iv.ReadWaitMs * float64(iv.Reads)))
			}
			if iv.Writes > 0 {
				c.WriteTicks += uint64(math.Round(iv.WriteWaitMs * float64(iv.Writes)))
			}
			c.ReadSectors += uint64(math.Round(iv.ReadBps * iv.Seconds / 512))
			c.WriteSectors += uint64(math.Round(iv.WriteBps * iv.Seconds / 512))
			c.InFlight = iv.InFlight
			cum[d], snap[d] = c, c
		}
		out = append(out, snap)
	}
	return out
}

// stageState is a resource's state with the lab's plan compiled, as the
// loop's prepare stage leaves it, with the default policy: each host on
// its own LUN, or with shared, every host on every LUN (what discovery
// sees of the lab's one tgt target).
func stageState(t *testing.T) (*Loops, *resourceState) {
	t.Helper()
	return stageStateOf(t, false)
}

func stageStateOf(t *testing.T, shared bool) (*Loops, *resourceState) {
	t.Helper()
	l := NewLoops(LoopConfig{Interval: 100 * time.Millisecond, DelayStep: 500 * time.Microsecond, MaxDelay: 40 * time.Millisecond,
		WriteBps: 1e6, ReadBps: 1e6, BulkQueue: 1.25, Cost: cost.Default(), NewRateSmoother: func() Smoother { return &lastValue{} }},
		nil, throttle.NewMemory(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	view := ResourceView{Consumers: map[netip.Addr][]string{}}
	for i, h := range stageHosts {
		dev := "loop" + strconv.Itoa(i)
		view.Devices = append(view.Devices, dev)
		view.Consumers[stageAddr[h]] = []string{dev}
	}
	if shared {
		for _, h := range stageHosts {
			view.Consumers[stageAddr[h]] = view.Devices
		}
	}
	topo := &Topology{Resources: map[string]ResourceView{"vg1": view}}
	g := &generation{topo: topo, specs: map[string]ResourceSpec{"vg1": {Name: "vg1", Threshold: 15 * time.Millisecond,
		NewController: func() Controller { return &propCtl{thr: 15} }, NewSmoother: func() Smoother { return &lastValue{} }}}}
	rs := &resourceState{}
	l.prepare(rs, g.specs["vg1"], view, g)
	return l, rs
}

// sample: the intervals the stage computes from the counters are the
// recorded ones; a device's first counters and a device missing from a
// snapshot give none.
func TestStageSampleDevices(t *testing.T) {
	for _, fixture := range []string{"testdata/stages/read-backup-baseline.csv", "testdata/stages/writers-baseline.csv"} {
		t.Run(fixture, func(t *testing.T) {
			ticks := loadRecorded(t, fixture)
			snaps := cumulative(ticks)
			_, rs := stageState(t)
			var lay tickLayout
			for k, snap := range snaps {
				if k == 7 {
					snap = maps1Without(snap, "loop2")
				}
				d := rs.sampleDevices(lay.fromMap(snap))
				for i, dev := range rs.plan.devices {
					want, recorded := ticks[k].dev[dev]
					switch {
					case k == 0 || k == 7 && dev == "loop2" || !recorded:
						if d.ok[i] {
							t.Fatalf("tick %d %s: an interval without previous counters", k, dev)
						}
					case k == 8 && dev == "loop2":
						// Two ticks' worth against the counters of tick 6.
						if !d.ok[i] || d.iv[i].Reads != ticks[7].dev[dev].Reads+want.Reads {
							t.Fatalf("tick %d %s: %+v, want the two ticks since its last counters", k, dev, d.iv[i])
						}
					default:
						got := d.iv[i]
						if !d.ok[i] || got.Reads != want.Reads || got.Writes != want.Writes ||
							(want.Reads > 0 && math.Abs(got.ReadWaitMs-want.ReadWaitMs) > 0.5/float64(want.Reads)+1e-9) {
							t.Fatalf("tick %d %s: %+v, recorded %+v", k, dev, got, want)
						}
					}
				}
			}
		})
	}
}

func maps1Without(m map[string]sample.Counters, k string) map[string]sample.Counters {
	out := map[string]sample.Counters{}
	for d, c := range m {
		if d != k {
			out[d] = c
		}
	}
	return out
}

// The recorded runs through sample and measure: each host's smoothed
// queue and load after the load has run a second and a half.
func measuredAt(t *testing.T, fixture string, until float64) (*resourceState, []ConsumerInput) {
	t.Helper()
	ticks := loadRecorded(t, fixture)
	l, rs := stageState(t)
	var lay tickLayout
	for k, snap := range cumulative(ticks) {
		d := rs.sampleDevices(lay.fromMap(snap))
		l.measure(rs, d, nil, time.Unix(0, 0), 15)
		if ticks[k].t >= until {
			break
		}
	}
	return rs, slices.Clone(rs.in.Consumers)
}

// measure: on the recorded runs, a backup host keeps ~4 requests in the
// resource and loads it in reads only, a writer host in writes only, and
// the reader (one request at a time) stays under the queue mark.
func TestStageMeasure(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		until   float64
		dir     string // the interferers' direction
	}{
		{"testdata/stages/read-backup-baseline.csv", 7.0, "read"},
		{"testdata/stages/writers-baseline.csv", 7.4, "write"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			_, cs := measuredAt(t, tc.fixture, tc.until)
			for _, c := range cs {
				switch c.Addr {
				case stageAddr["b2"]:
					if c.Queue >= 1.25 || c.Load.Write != 0 || c.Load.Read < 0.1 || c.Load.Read > 0.25 {
						t.Errorf("reader: queue %.2f, load %+v; want under the mark, ~0.17 s/s of reads", c.Queue, c.Load)
					}
				default:
					hi, lo := c.Load.Read, c.Load.Write
					if tc.dir == "write" {
						hi, lo = lo, hi
					}
					if c.Queue < 2.5 || hi < 0.15 || lo != 0 {
						t.Errorf("%v: queue %.2f, load %+v; want ~4 queued and only %ss", c.Addr, c.Queue, c.Load, tc.dir)
					}
				}
			}
		})
	}
}

// indicate: with the backup unregulated every device waits ~27 ms; the
// indicator measures the devices of the consumers not slowed (the
// reader's), the same as all of them before anyone is slowed, and the
// tail factor stays 1 until it has 50 samples.
func TestStageIndicate(t *testing.T) {
	ticks := loadRecorded(t, "testdata/stages/read-backup-baseline.csv")
	for _, tc := range []struct {
		name   string
		slowed []string
		devs   []string // whose reads the indicator must be
	}{
		{"nobody slowed: every device", nil, []string{"loop0", "loop1", "loop2", "loop3"}},
		{"the backup slowed: the reader's device", []string{"b3", "b4", "b5"}, []string{"loop0"}},
		{"everyone slowed: every device", []string{"b2", "b3", "b4", "b5"}, []string{"loop0", "loop1", "loop2", "loop3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rs := stageState(t)
			var lay tickLayout
			for _, h := range tc.slowed {
				rs.slowed[stageAddr[h]] = true
			}
			snaps := cumulative(ticks)
			for k, snap := range snaps {
				d := rs.sampleDevices(lay.fromMap(snap))
				ind := rs.indicate(true, 15, d)
				var ticksMs, reads float64
				for _, dev := range tc.devs {
					if iv, ok := ticks[k].dev[dev]; ok && k > 0 && iv.Reads > 0 {
						ticksMs += math.Round(iv.ReadWaitMs * float64(iv.Reads))
						reads += float64(iv.Reads)
					}
				}
				if reads == 0 {
					continue
				}
				if want := ticksMs / reads; math.Abs(ind.rawMs-want) > 1e-9 {
					t.Fatalf("tick %d: indicator %.3f ms, want %.3f over %v", k, ind.rawMs, want, tc.devs)
				}
				if ind.q != 1 {
					t.Fatalf("tick %d: tail factor %v before 50 samples", k, ind.q)
				}
			}
		})
	}
}

// stageCtl is a controller that records what the control stage feeds
// it: each Update's input, each Preload's level and hold.
type stageCtl struct {
	step     int // Update's answer
	in       []float64
	preloads []float64
	holds    []int
	held     int // HoldIntegral calls
}

func (c *stageCtl) HoldIntegral() { c.held++ }

func (c *stageCtl) Update(m float64) int { c.in = append(c.in, m); return c.step }
func (c *stageCtl) Reset()               {}
func (c *stageCtl) Preload(level float64, hold int) int {
	c.preloads, c.holds = append(c.preloads, level), append(c.holds, hold)
	return int(math.Ceil(level))
}

// control: on the recorded writers' run (the writers start at 5.4 s) the
// controller gets the smoothed indicator × the tail factor (NaN before a
// read has completed); the onset detector fires once, on the first tick
// whose recorded writes pass the floor, and preloads the controller with
// what the memory learnt, capped at max_delay's steps, only if the
// memory knows a level and the onset response is on; with none known, the
// memory learns the loaded ticks' output once the surge has settled.
func TestStageControl(t *testing.T) {
	ticks := loadRecorded(t, "testdata/stages/writers-baseline.csv")
	surge := recordedSurge(t, ticks)
	for _, tc := range []struct {
		name      string
		q         float64 // the tail objective's factor
		detector  bool    // an onset detector (the onset response or the rate lever on)
		onset     bool    // the onset response on
		remember  float64 // the memory's level before the run (0: none)
		preload   float64 // the level preloaded at the surge (0: none)
		learnsOwn bool    // the memory ends at the controller's output
	}{
		{name: "the indicator as it is", q: 1},
		{name: "the tail factor scales it", q: 0.8},
		{name: "onset, nothing remembered: no guess, the memory learns", q: 1, detector: true, onset: true, learnsOwn: true},
		{name: "onset, 30 steps remembered: preloaded", q: 1, detector: true, onset: true, remember: 30, preload: 30},
		{name: "onset, 200 steps remembered: preloaded at max_delay's 80", q: 1, detector: true, onset: true, remember: 200, preload: 80},
		{name: "detector without the onset response (rate lever): counts, no preload", q: 1, detector: true, remember: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, rs := stageState(t)
			var lay tickLayout
			l.cfg.Onset = tc.onset
			ctl := &stageCtl{step: 7}
			rs.ctrl = ctl
			if tc.detector {
				rs.onset = control.NewOnsetDetector(control.DefaultOnsetConfig(l.cfg.WriteBps))
				rs.mem = control.NewMemory(onsetMemoryAlpha)
				for i := 0; tc.remember > 0 && i < 10; i++ {
					rs.mem.Observe(tc.remember)
				}
			}
			for k, snap := range cumulative(ticks) {
				d := rs.sampleDevices(lay.fromMap(snap))
				ind := rs.indicate(false, 15, d)
				st := ResourceStatus{Name: "vg1", ThresholdMs: 15, RawWaitMs: ind.rawMs, Updated: time.Unix(int64(100+k), 0)}
				st.Consumers = l.measure(rs, d, nil, time.Unix(0, 0), 15)
				step := l.control(rs, &st, tc.q)
				v, ok := rs.ind.Value()
				switch got := ctl.in[len(ctl.in)-1]; {
				case !ok && (!math.IsNaN(got) || st.IndicatorMs != 0):
					t.Fatalf("tick %d, no indicator: the controller got %v, status %v; want NaN and none", k, got, st.IndicatorMs)
				case ok && (got != v*tc.q || st.IndicatorMs != v):
					t.Fatalf("tick %d: the controller got %v, status %v; want %v × %v", k, got, st.IndicatorMs, v, tc.q)
				}
				wantStep := ctl.step
				if k == surge && tc.preload > 0 {
					wantStep = int(tc.preload)
				}
				if step != wantStep {
					t.Fatalf("tick %d: step %d, want %d", k, step, wantStep)
				}
				// last_onset: found at the surge, acted on when the output
				// rose above the one before it (the preload; the stage's
				// PID stays at 7).
				if o := st.LastOnset; (o != nil) != (k >= surge && tc.detector) ||
					(o != nil && (o.At != time.Unix(int64(100+surge), 0) || o.ActedAt.IsZero() != (tc.preload == 0))) {
					t.Fatalf("tick %d: last onset %+v (surge at tick %d)", k, o, surge)
				}
				if fired := k >= surge && tc.detector; st.Onsets != map[bool]uint64{true: 1}[fired] {
					t.Fatalf("tick %d: %d onsets", k, st.Onsets)
				}
			}
			if want := map[bool][]float64{true: {tc.preload}}[tc.preload > 0]; !slices.Equal(ctl.preloads, want) ||
				(len(want) > 0 && ctl.holds[0] != onsetHold) {
				t.Errorf("preloads %v holds %v, want %v held %d ticks", ctl.preloads, ctl.holds, want, onsetHold)
			}
			if tc.learnsOwn {
				if lvl, known := rs.mem.Level(); !known || lvl != float64(ctl.step) {
					t.Errorf("memory %v (known %v) after the surge settled, want the output %d", lvl, known, ctl.step)
				}
			}
		})
	}
}

// control: while last tick's rise limit held a setting below the
// policy's ask, the controller's integral is held for the tick (the
// limit's lag is not the output's shortfall); otherwise it is not.
func TestStageControlHoldsIntegralWhileRiseLimited(t *testing.T) {
	for _, limited := range []bool{false, true} {
		l, rs := stageState(t)
		ctl := &stageCtl{step: 7}
		rs.ctrl, rs.limited = ctl, limited
		st := ResourceStatus{Name: "vg1", ThresholdMs: 15}
		l.control(rs, &st, 1)
		if want := map[bool]int{true: 1}[limited]; ctl.held != want {
			t.Errorf("limited %v: %d holds, want %d", limited, ctl.held, want)
		}
	}
}

// recordedSurge is the writers' first tick in the recording: the first
// whose writes (every device's) reach the onset detector's floor, the
// stage state's WriteBps of 1 MB/s.
func recordedSurge(t *testing.T, ticks []recordedTick) int {
	t.Helper()
	for k, tk := range ticks {
		var w float64
		for _, iv := range tk.dev {
			w += iv.WriteBps
		}
		if k > 0 && w >= 1e6 {
			if tk.t < 5.4 || tk.t > 5.6 {
				t.Fatalf("the recording's surge at %.1f s, want the writers' start at 5.4 s", tk.t)
			}
			return k
		}
	}
	t.Fatal("no surge in the recording")
	return -1
}

// With every host on every LUN (the lab's autonomic discovery, a shared
// datastore) the devices cannot say whose queue is whose: each consumer's
// queue is its own commands on the wire × the devices' mean wait (not
// the resource's queue of 13, which once slowed the reader with the
// backup), the wire's bytes price each consumer, the backup hosts join
// and get read delays, and the reader is never slowed. Without command
// counts (no wire) the queue rule stays out.
func TestStageSharedLUNs(t *testing.T) {
	for _, cmds := range []bool{false, true} {
		t.Run(fmt.Sprintf("commands on the wire %v", cmds), func(t *testing.T) { sharedLUNs(t, cmds) })
	}
}

func sharedLUNs(t *testing.T, cmds bool) {
	ticks := loadRecorded(t, "testdata/stages/read-backup-baseline.csv")
	l, rs := stageStateOf(t, true)
	var lay tickLayout
	for k, snap := range cumulative(ticks) {
		wire := map[netip.Addr]sample.Rate{}
		for i, h := range stageHosts {
			iv := ticks[k].dev["loop"+strconv.Itoa(i)]
			wire[stageAddr[h]] = sample.Rate{ReadBps: iv.ReadBps, WriteBps: iv.WriteBps, Conns: 1}
			if cmds && iv.Seconds > 0 {
				// Each host's commands are its own LUN's requests.
				wire[stageAddr[h]] = sample.Rate{ReadBps: iv.ReadBps, WriteBps: iv.WriteBps, Conns: 1, CommandsPerSec: float64(iv.Reads+iv.Writes) / iv.Seconds}
			}
		}
		l.measure(rs, rs.sampleDevices(lay.fromMap(snap)), wire, time.Unix(0, 0), 15)
		if ticks[k].t >= 7.0 {
			break
		}
	}
	for _, c := range rs.in.Consumers {
		backup := c.Addr != stageAddr["b2"]
		t.Logf("%v: queue %.2f", c.Addr, c.Queue)
		switch {
		case !cmds && c.Queue != 0:
			t.Errorf("%v: queue %.2f on shared LUNs without commands, want none", c.Addr, c.Queue)
		case cmds && backup != (c.Queue >= 1.25):
			t.Errorf("%v: queue %.2f from its commands, want ≥ 1.25 only for the backup", c.Addr, c.Queue)
		}
		if backup != (c.ReadEWMA > 1e6) || c.Load.Write != 0 || (backup && c.Load.Read < 0.15) || (!backup && c.Load.Read > 0.02) {
			t.Errorf("%v: read %.2f MB/s, load %+v: want the wire's own bytes priced", c.Addr, c.ReadEWMA/1e6, c.Load)
		}
	}
	st := ResourceStatus{Name: "vg1"}
	out := l.decide(rs, &st, 20)
	for _, h := range stageHosts {
		want := throttle.Setting{ReadDelay: 10 * time.Millisecond}
		if h == "b2" {
			want = throttle.Setting{}
		}
		if got := byAddr(&rs.in, out)[stageAddr[h]]; got != want {
			t.Errorf("%s: %+v, want %+v", h, got, want)
		}
	}
}
