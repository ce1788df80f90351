package agent

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// threshold: auto through the pipeline: the resource starts at the spec's
// threshold, learning; a quiet reader gives the floor, the writer's load
// the wait at its peak; once learned, status, the threshold in force and
// the controller's setpoint all carry the learned threshold; a reload to
// a set threshold retargets the controller back to it.
func TestAutoThresholdInPipeline(t *testing.T) {
	l, _ := testLoops(t)
	pid := func(thr time.Duration) Controller {
		p, err := control.NewPID(control.PIDConfig{Threshold: ms(thr), Kp: 0.5, Interval: 100 * time.Millisecond,
			Ti: time.Second, MaxSteps: 40, Step: 500 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	spec := l.gen.Load().specs["vg1"]
	spec.NewController = func() Controller { return pid(spec.Threshold) }
	spec.AutoThreshold, spec.NewControllerAt = true, pid
	l.SetSpecs(map[string]ResourceSpec{"vg1": spec})
	// 30 quiet ticks (the reader alone, 6 ms), then the writer at 20 MB/s
	// and the reader at 30 ms.
	ss := &seqSampler{}
	var c [3]sample.Counters
	const quiet, ticks = 30, 330
	for i := 1; i <= ticks; i++ {
		at := time.Unix(0, int64(i)*1e8)
		wait := uint64(6 * 4)
		if i > quiet {
			wait = 30 * 4
			c[1].Writes += 30
			c[1].WriteSectors += 3900
		}
		c[0].Reads, c[0].ReadTicks, c[0].ReadSectors = c[0].Reads+4, c[0].ReadTicks+wait, c[0].ReadSectors+64
		snap := map[string]sample.Counters{}
		for k, name := range []string{"loop0", "loop1", "loop2"} {
			c[k].Device, c[k].Time = name, at
			snap[name] = c[k]
		}
		ss.snaps = append(ss.snaps, snap)
	}
	l.sampler = ss
	setpoint := func() float64 { return l.states["vg1"].ctrl.(*control.PID).Config().Threshold }
	for i := 1; i <= ticks; i++ {
		if err := l.Step(time.Unix(0, int64(i)*1e8)); err != nil {
			t.Fatal(err)
		}
		st := l.Status()[0]
		if st.Auto == nil {
			t.Fatalf("tick %d: no threshold_auto in status", i)
		}
		if i == quiet && (st.Auto.State != "learning" || st.ThresholdMs != 15 || setpoint() != 15) {
			t.Fatalf("tick %d: %s at %v ms (controller %v), want learning at the start, 15", i, st.Auto.State, st.ThresholdMs, setpoint())
		}
	}
	st := l.Status()[0]
	if st.Auto.State != "learned" || st.ThresholdMs != 30 || setpoint() != 30 || st.Auto.PeakMBs < 20 || st.Auto.PeakMBs > 20.5 {
		t.Fatalf("after the load: %s at %v ms (controller %v), peak %.2f MB/s; want learned 30 ms at 20.3 MB/s (the writer and the reader)", st.Auto.State, st.ThresholdMs, setpoint(), st.Auto.PeakMBs)
	}
	// The threshold metric is the learned threshold.
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(l.Status, throttle.NewMemory()))
	want := "# HELP sanqos_resource_threshold_seconds Read-wait threshold of the resource.\n# TYPE sanqos_resource_threshold_seconds gauge\nsanqos_resource_threshold_seconds{resource=\"vg1\"} 0.03\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sanqos_resource_threshold_seconds"); err != nil {
		t.Error(err)
	}
	spec.AutoThreshold, spec.Threshold = false, 20*time.Millisecond
	l.SetSpecs(map[string]ResourceSpec{"vg1": spec})
	if err := l.Step(time.Unix(0, int64(ticks+1)*1e8)); err != nil {
		t.Fatal(err)
	}
	if st := l.Status()[0]; st.Auto != nil || st.ThresholdMs != 20 || setpoint() != 20 {
		t.Fatalf("after a reload to 20 ms: auto %v, %v ms, controller %v", st.Auto, st.ThresholdMs, setpoint())
	}
}

// A learned threshold's changes are logged at most once a minute, the
// first always, each log line saying how many went unlogged before it;
// the start's changes while learning are not logged.
func TestAutoThresholdLogRateLimit(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a := &autoState{learner: newAutoThreshold(15, true)}
	t0 := time.Unix(1e9, 0)
	for _, tc := range []struct {
		at      time.Duration
		learned bool
		logged  string // "" none
	}{
		{0, false, ""}, // the start moved with the floor
		{10 * time.Second, true, "from_ms=15 to_ms=12 peak_mb_s=0 wait_at_90pct_peak_ms=0 floor_ms=0 changes_not_logged=1"},
		{20 * time.Second, true, ""},
		{50 * time.Second, true, ""},
		{71 * time.Second, true, "changes_not_logged=2"},
	} {
		buf.Reset()
		first := tc.learned && !a.learner.learned
		a.learner.learned, a.learner.thrMs = tc.learned, 12
		a.noteChange(log, "vg1", 15, first, t0.Add(tc.at))
		got := buf.String()
		if tc.logged == "" && got != "" || tc.logged != "" && !strings.Contains(got, tc.logged) {
			t.Errorf("at %v: logged %q, want %q", tc.at, got, tc.logged)
		}
	}
}
