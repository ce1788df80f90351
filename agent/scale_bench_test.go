package agent

import (
	"fmt"
	"image/color"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/filter"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// scaleSampler synthesises diskstats for n devices, advancing every Read:
// every fifth device writes 2 MB/s, the others read with a wait that
// depends on the resource, so some resources are saturated. Like
// sample.Diskstats it is a Snapshotter; it makes the map of its counters
// too (outside the benchmarks' timers), as it did before the tick used
// the slice, so that before and after touch the same memory.
type scaleSampler struct {
	names []string
	tick  int
	snap  map[string]sample.Counters
	list  []sample.Counters // snap in names' order
}

func (s *scaleSampler) advance() {
	s.tick++
	t := time.Unix(0, 0).Add(time.Duration(s.tick) * 100 * time.Millisecond)
	n := uint64(s.tick)
	if s.snap == nil { // the agent keeps no reference to a tick's counters
		s.snap = make(map[string]sample.Counters, len(s.names))
	}
	s.list = grow(s.list, len(s.names))
	for i, d := range s.names {
		c := sample.Counters{Device: d, Time: t}
		if i%5 == 4 {
			c.Writes, c.WriteSectors = 3*n, 400*n
		} else {
			c.Reads, c.ReadSectors, c.ReadTicks = 4*n, 64*n, uint64(4*(5+i/10%30))*n
		}
		s.snap[d], s.list[i] = c, c
	}
}

func (s *scaleSampler) Read(...string) (map[string]sample.Counters, error) { return s.snap, nil }

// Snapshot implements Snapshotter, as the agent's diskstats sampler.
func (s *scaleSampler) Snapshot() ([]sample.Counters, uint64, error) {
	return s.list, 1, nil
}

// scaleLoops is one agent managing resources × perRes consumers, each
// consumer on its own device, with the daemon's PID and EWMA.
func scaleLoops(resources, perRes int) (*Loops, *scaleSampler) {
	ss := &scaleSampler{}
	topo := &Topology{Resources: map[string]ResourceView{}}
	specs := map[string]ResourceSpec{}
	for r := 0; r < resources; r++ {
		name := fmt.Sprintf("r%04d", r)
		v := ResourceView{Consumers: map[netip.Addr][]string{}}
		for c := 0; c < perRes; c++ {
			i := r*perRes + c + 1
			dev := fmt.Sprintf("lun%05d", i)
			ss.names = append(ss.names, dev)
			v.Devices = append(v.Devices, dev)
			v.Consumers[netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})] = []string{dev}
		}
		topo.Resources[name] = v
		specs[name] = ResourceSpec{Name: name, Threshold: 15 * time.Millisecond,
			NewController: func() Controller {
				p, _ := control.NewPID(control.PIDConfig{Threshold: 15, Kp: 0.8, Interval: 100 * time.Millisecond, Ti: 200 * time.Millisecond,
					MaxSteps: 40, Step: 500 * time.Microsecond, ReleaseBand: 0.25, ReleaseFactor: 0.5})
				return p
			},
			NewSmoother: func() Smoother { e, _ := filter.NewEWMA(0.5); return e }}
	}
	l := NewLoops(LoopConfig{Interval: 100 * time.Millisecond, DelayStep: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond, WriteBps: 1e6,
		NewRateSmoother: func() Smoother { e, _ := filter.NewEWMA(0.5); return e }}, ss, throttle.NewMemory(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	l.SetTopology(topo)
	l.SetSpecs(specs)
	return l, ss
}

// TestStepAllocs: a steady tick reuses its buffers (issue 55's budget is
// 64 KiB per tick at 1,000 resources): a few allocations (events), not
// some per resource.
func TestStepAllocs(t *testing.T) {
	l, ss := scaleLoops(100, 10)
	i := 0
	step := func() {
		ss.advance()
		if err := l.Step(time.Unix(0, int64(i)*1e8)); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range 20 {
		step()
	}
	if n := testing.AllocsPerRun(20, step); n > 50 {
		t.Errorf("%v allocations per tick of 100 resources, want ≤ 50", n)
	}
}

// BenchmarkTick1000x10000 is one control tick (Loops.Step: 1,000 resource
// pipelines over 10,000 consumers, merge, apply) of one agent. Issue 55's
// budget is 1 ms of CPU and 64 KiB per tick. cpu-ms/op is the process's
// CPU (GC included) over the Steps alone: on a shared machine ns/op is
// wall time and counts other processes' turns.
func BenchmarkTick1000x10000(b *testing.B) { tickBench(b, 1000, 10) }

// tickBench runs b.N ticks of resources × perRes consumers after 20 that
// settle controllers, smoothers and throttles; it reports cpu-ms/op and
// returns it with the bytes allocated per tick.
func tickBench(b *testing.B, resources, perRes int) (cpuMs, bytes float64) {
	l, ss := scaleLoops(resources, perRes)
	for i := 0; i < 20; i++ { // warm up: controllers, smoothers, throttles settle
		ss.advance()
		if err := l.Step(time.Unix(0, int64(i)*1e8)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ss.advance()
		b.StartTimer()
		c0 := processCPU(b)
		if err := l.Step(time.Unix(0, int64(i+20)*1e8)); err != nil {
			b.Fatal(err)
		}
		cpu += processCPU(b) - c0
	}
	runtime.ReadMemStats(&m1)
	cpuMs = ms(cpu) / float64(b.N)
	b.ReportMetric(cpuMs, "cpu-ms/op")
	return cpuMs, float64(m1.TotalAlloc-m0.TotalAlloc) / float64(b.N)
}

// BenchmarkTickScale is BENCHMARKS.md's scale curve: one tick at 1 to
// 1,000 resources × 10 to 10,000 consumers (each on its own device), CPU
// and bytes allocated per tick. With SANQOS_SCALE_PLOT=file.png it also
// draws them.
func BenchmarkTickScale(b *testing.B) {
	var pts []scalePoint
	for _, r := range []int{1, 10, 100, 1000} {
		for _, c := range []int{10, 100, 1000, 10000} {
			if c < r {
				continue
			}
			pt := scalePoint{resources: r, consumers: c}
			b.Run(fmt.Sprintf("r=%d/c=%d", r, c), func(b *testing.B) { pt.cpuMs, pt.bytes = tickBench(b, r, c/r) })
			pts = append(pts, pt)
		}
	}
	if path := os.Getenv("SANQOS_SCALE_PLOT"); path != "" {
		if err := plotScale(path, pts); err != nil {
			b.Fatal(err)
		}
	}
}

type scalePoint struct {
	resources, consumers int
	cpuMs, bytes         float64
}

// plotScale draws CPU and bytes per tick against consumers, a line per
// resource count, log-log, with issue 55's budgets dashed.
func plotScale(path string, pts []scalePoint) error {
	img := vgimg.New(12*vg.Inch, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 3, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	for i, panel := range []struct {
		title, label  string
		budget, floor float64 // floor: where 0 is drawn (log scale)
		y             func(scalePoint) float64
	}{
		{"CPU per tick", "ms of CPU", 1, 1e-3, func(p scalePoint) float64 { return p.cpuMs }},
		{"allocated per tick", "bytes", 64 << 10, 1, func(p scalePoint) float64 { return p.bytes }},
	} {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = panel.title, "consumers", panel.label
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = false, false // bottom right: the curves rise to the right
		for k, r := range []int{1, 10, 100, 1000} {
			var xy plotter.XYs
			for _, pt := range pts {
				if pt.resources == r {
					xy = append(xy, plotter.XY{X: float64(pt.consumers), Y: max(panel.y(pt), panel.floor)}) // log: no 0
				}
			}
			l, s, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			l.Color, s.Color = plotutil.Color(k), plotutil.Color(k)
			p.Add(l, s)
			p.Legend.Add(fmt.Sprintf("%d resource(s)", r), l, s)
		}
		budget, err := plotter.NewLine(plotter.XYs{{X: 10, Y: panel.budget}, {X: 10000, Y: panel.budget}})
		if err != nil {
			return err
		}
		budget.Color, budget.Dashes = color.RGBA{R: 200, A: 255}, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(budget)
		p.Legend.Add("issue 55 budget", budget)
		p.Draw(tiles.At(dc, i, 0))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// processCPU is the process's user and system CPU so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
