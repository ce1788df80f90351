package agent

import (
	"math"
	"testing"
	"time"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/sample"
)

// fixedCtl stands for a cluster seam that follows a shared step: its
// output does not depend on the local measurement, and it records what
// it was fed.
type fixedCtl struct {
	step int
	fed  []float64
}

func (f *fixedCtl) Update(m float64) int { f.fed = append(f.fed, m); return f.step }
func (f *fixedCtl) Reset()               {}

// A target host whose LUNs on a resource only see writes (no read ever
// completes, so there is no indicator) must still run the controller each
// tick: in a cluster the resource's leader decides the step, and this
// host's writers are the ones to slow.
func TestWriteOnlyResourceStillFollowsController(t *testing.T) {
	l, mem := testLoops(t)
	ctl := &fixedCtl{step: 4}
	spec := l.gen.Load().specs["vg1"]
	spec.NewController = func() Controller { return ctl }
	l.SetSpecs(map[string]ResourceSpec{"vg1": spec})
	ss := &seqSampler{}
	for i := 1; i <= 4; i++ {
		c := counters(i, 0)
		delete(c, "loop0") // no reads at all
		ss.snaps = append(ss.snaps, c)
	}
	l.sampler = ss
	for i := 1; i <= 4; i++ {
		if err := l.Step(time.Unix(0, int64(i)*1e8)); err != nil {
			t.Fatal(err)
		}
	}
	if len(ctl.fed) == 0 {
		t.Fatal("controller never consulted on a resource without reads")
	}
	for _, m := range ctl.fed {
		if !math.IsNaN(m) {
			t.Fatalf("fed %v without any read; want NaN (no measurement)", m)
		}
	}
	if got := mem.List()[writer].WriteDelay; got != 2*time.Millisecond {
		t.Fatalf("writer's delay %v, want the controller's 4 steps = 2ms (list %v)", got, mem.List())
	}
	if _, ok := mem.List()[boss]; ok {
		t.Fatal("the important consumer was throttled")
	}
}

// A reload that changes a resource's threshold reaches the running loop:
// the controller is rebuilt with the new threshold and starts from the
// step in force, then follows the new setpoint.
func TestReloadRetargetsRunningController(t *testing.T) {
	l, _ := testLoops(t)
	newPID := func(thr float64) func() Controller {
		return func() Controller {
			p, err := control.NewPID(control.PIDConfig{Threshold: thr, Kp: 0.5, Interval: 100 * time.Millisecond,
				Ti: time.Second, MaxSteps: 40, Step: 500 * time.Microsecond})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	spec := l.gen.Load().specs["vg1"]
	spec.NewController = newPID(15)
	l.SetSpecs(map[string]ResourceSpec{"vg1": spec})
	// The reader waits 30 ms every tick: twice the first threshold, below
	// the second.
	ss := &seqSampler{}
	const ticks = 40
	for i := 1; i <= ticks; i++ {
		at := time.Unix(0, int64(i)*1e8)
		ss.snaps = append(ss.snaps, map[string]sample.Counters{
			"loop0": {Device: "loop0", Time: at, Reads: 4 * uint64(i), ReadTicks: 120 * uint64(i), ReadSectors: 64 * uint64(i)},
			"loop1": {Device: "loop1", Time: at, Writes: 30 * uint64(i), WriteSectors: 3900 * uint64(i)},
		})
	}
	l.sampler = ss
	tick := 0
	step := func() int {
		tick++
		if err := l.Step(time.Unix(0, int64(tick)*1e8)); err != nil {
			t.Fatal(err)
		}
		return l.Status()[0].Step
	}
	var before int
	for range 15 {
		before = step()
	}
	if before == 0 {
		t.Fatal("not throttled at twice the threshold")
	}
	spec.Threshold, spec.NewController = 60*time.Millisecond, newPID(60)
	l.SetSpecs(map[string]ResourceSpec{"vg1": spec})
	after := step()
	if p, ok := l.states["vg1"].ctrl.(*control.PID); !ok || p.Config().Threshold != 60 {
		t.Fatalf("controller not rebuilt with the new threshold: %#v", l.states["vg1"].ctrl)
	}
	// 30 ms is half the new threshold: the step comes down (it would
	// have kept rising at 15 ms).
	for range 20 {
		after = step()
	}
	if after >= before {
		t.Fatalf("below the new threshold the step should fall: %d → %d", before, after)
	}
}

// retarget carries the step in force into the new controller: its output
// before any measurement is the old one's.
func TestRetargetIsBumpless(t *testing.T) {
	mk := func(thr float64) *control.PID {
		p, err := control.NewPID(control.PIDConfig{Threshold: thr, Kp: 0.5, Interval: 100 * time.Millisecond,
			Ti: time.Second, MaxSteps: 40, Step: 500 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := mk(15)
	for range 10 {
		old.Update(30)
	}
	if old.Output() == 0 {
		t.Fatal("old controller idle")
	}
	got := retarget(old, mk(10)).(*control.PID)
	if got == old || got.Output() != old.Output() || got.Config().Threshold != 10 {
		t.Fatalf("retarget: output %d (old %d), threshold %v", got.Output(), old.Output(), got.Config().Threshold)
	}
	// A controller without Preset is kept rather than restarted at zero.
	keep := &fixedCtl{step: 3}
	if retarget(keep, &fixedCtl{}) != Controller(keep) {
		t.Fatal("a controller that cannot be preset was replaced")
	}
}
