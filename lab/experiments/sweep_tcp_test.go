package experiments

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/throttle"
)

func TestPointTCP(t *testing.T) {
	// Two delays, two repeats: steps d0 d1 d0 d1, cumulative counters at
	// each change and at the end.
	marks := []lab.TCPCounters{{RetransSegs: 0}, {RetransSegs: 1, LossProbes: 1}, {RetransSegs: 1, LossProbes: 1}, {RetransSegs: 4, LossProbes: 2}, {RetransSegs: 9, LossProbes: 2}}
	for _, c := range []struct {
		name  string
		marks []lab.TCPCounters
		i     int
		want  *lab.TCPCounters
	}{
		{"first delay: steps 0 and 2", marks, 0, &lab.TCPCounters{RetransSegs: 4, LossProbes: 2}},
		{"second delay: steps 1 and 3, the last to the end", marks, 1, &lab.TCPCounters{RetransSegs: 5}},
		{"an event that did not run", marks[:4], 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := pointTCP(c.marks, 2, 2, c.i)
			if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestSweepCriterion(t *testing.T) {
	delays := []float64{0, 0.6, 1.6, 2.6, 3.6, 4.6, 5.6, 6.6, 7.6, 8.6, 9.6}
	rate := func(f func(d float64) float64) []float64 {
		var r []float64
		for _, d := range delays {
			r = append(r, f(d))
		}
		return r
	}
	for _, c := range []struct {
		name  string
		mbs   []float64
		pass  bool
		slope float64
	}{
		// One I/O in flight: 200 MB take 200/23.5 s plus one delay per
		// 64 KiB I/O (3052 I/Os → 3.052 s per ms): time linear, rate not.
		{"one delay per I/O passes", rate(func(d float64) float64 { return 200 / (200/23.5 + 3.052*d) }), true, 3.052},
		{"a throttle that does nothing fails", rate(func(float64) float64 { return 20 }), false, 0},
		{"a cliff is not linear", rate(func(d float64) float64 {
			if d > 5 {
				return 2
			}
			return 20
		}), false, 12.564},
	} {
		s := SweepSummary{R2Time: map[string]float64{}}
		s.fitTime("read", delays, c.mbs)
		if s.Criterion.Pass["read"] != c.pass || s.Criterion.SecondsPerMs["read"] != c.slope {
			t.Errorf("%s: pass %v slope %v (R² %v), want %v %v", c.name, s.Criterion.Pass["read"], s.Criterion.SecondsPerMs["read"], s.R2Time["read"], c.pass, c.slope)
		}
	}
}

func TestSweepFitDirection(t *testing.T) {
	s := newSweepSummary("delay-sweep", "test")
	var xs, ys []float64
	for _, dir := range []string{"read", "write"} {
		for i, d := range []float64{0, 0.6, 1.6} {
			mbs := 20 - float64(i)*5
			if dir == "write" {
				mbs /= 2
			}
			s.Points = append(s.Points, SweepPoint{Direction: dir, DelayMs: d, MBs: mbs, Repeats: []float64{mbs}})
			if dir == "write" {
				xs, ys = append(xs, d), append(ys, mbs)
			}
		}
	}
	dir := t.TempDir()
	if err := s.fitDirection(dir, "write", xs, ys, ", test"); err != nil {
		t.Fatal(err)
	}
	if got := s.RatioAtMax["write"]; got != 0.5 {
		t.Errorf("write ratio at max %v, want 0.5 (its own points only)", got)
	}
	if _, ok := s.RatioAtMax["read"]; ok {
		t.Errorf("read judged too: %v", s.RatioAtMax)
	}
	for _, f := range []string{"write-sweep.png", "write-time-per-200mb.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if got := sweepSetting("write", time.Millisecond); got != (throttle.Setting{WriteDelay: time.Millisecond}) {
		t.Errorf("write sweep sets %+v", got)
	}
	if got := sweepSetting("read", time.Millisecond); got != (throttle.Setting{ReadDelay: time.Millisecond}) {
		t.Errorf("read sweep sets %+v", got)
	}
}
