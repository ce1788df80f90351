package control

import (
	"math"
	"slices"
	"testing"
)

func TestOnsetDetector(t *testing.T) {
	const mb = 1e6
	for _, tc := range []struct {
		name    string
		rates   []float64 // bytes/s per sample
		writers []int     // consumers writing per sample (nil: 1 while loud)
		fires   []int     // samples that are the first of a surge
	}{
		{"quiet never fires", []float64{0, 0, 0.5 * mb, 0, 0}, nil, nil},
		{"armed from the start", []float64{12 * mb, 12 * mb, 12 * mb}, nil, []int{0}},
		{"one surge, one firing", []float64{0, 0, 0, 6 * mb, 12 * mb, 12 * mb, 11 * mb}, nil, []int{3}},
		{"re-arms only after the quiet spell", []float64{0, 0, 0, 12 * mb, 0, 0, 12 * mb, 0, 0, 0, 12 * mb}, nil,
			[]int{3, 10}},
		{"more writers joining a running load",
			[]float64{0, 0, 0, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 8 * mb, 8 * mb},
			[]int{0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3}, []int{3, 14}},
		{"the same writers sped up by a throttle's release are no surge",
			[]float64{0, 0, 0, 12 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 2 * mb, 12 * mb}, nil,
			[]int{3}},
		{"joining writers that do not raise the rate are no surge",
			[]float64{0, 0, 0, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 6 * mb, 7 * mb},
			[]int{0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3}, []int{3}},
		{"NaN is no sample", []float64{0, 0, 0, nan, 12 * mb}, nil, []int{4}},
	} {
		d := NewOnsetDetector(DefaultOnsetConfig(1 * mb))
		var got []int
		for i, r := range tc.rates {
			n := 0
			if tc.writers != nil {
				n = tc.writers[i]
			} else if r >= mb {
				n = 1
			}
			if d.Update(r, n) {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, tc.fires) {
			t.Errorf("%s: fired at %v, want %v", tc.name, got, tc.fires)
		}
		if d.Fired() != uint64(len(tc.fires)) {
			t.Errorf("%s: Fired() = %d, want %d", tc.name, d.Fired(), len(tc.fires))
		}
	}
}

func TestOnsetSettled(t *testing.T) {
	d := NewOnsetDetector(DefaultOnsetConfig(1e6))
	for i := 0; i < 3; i++ {
		d.Update(0, 0)
		if d.Settled() {
			t.Fatal("settled while quiet")
		}
	}
	for i := 0; i <= settleTicks; i++ {
		d.Update(12e6, 3)
		if want := i >= settleTicks; d.Settled() != want {
			t.Fatalf("sample %d after the onset: Settled() = %v, want %v", i, d.Settled(), want)
		}
	}
	d.Update(0, 0)
	if d.Settled() {
		t.Fatal("settled after the load stopped")
	}
}

func TestMemory(t *testing.T) {
	m := NewMemory(0.5)
	for i := 0; i < minMemorySamples-1; i++ {
		m.Observe(20)
		if _, ok := m.Level(); ok {
			t.Fatalf("level known after %d samples", i+1)
		}
	}
	m.Observe(nan) // ignored
	if _, ok := m.Level(); ok {
		t.Fatal("a NaN counted as a sample")
	}
	m.Observe(40)
	if l, ok := m.Level(); !ok || l != 30 {
		t.Fatalf("level %v %v, want 30 true", l, ok)
	}
}

func TestPIDPreload(t *testing.T) {
	cfg := PIDConfig{Threshold: 10, Kp: 0.8, Interval: 100e6, Ti: 200e6, MaxSteps: 80, Step: DefaultStep, ReleaseBand: 0.25, ReleaseFactor: 0.5}
	p := mustPID(t, cfg)
	p.Update(6) // healthy: no throttle
	if got := p.Preload(30.2, 3); got != 31 {
		t.Fatalf("preload to 30.2 steps gave %d, want 31", got)
	}
	if got := p.Preload(10, 3); got != 31 {
		t.Fatalf("a lower preload loosened the throttle to %d", got)
	}
	// While held, a healthy reading below the release band only moves the
	// integral by its ordinary law (ki·e = 0.4 × −4 per tick) …
	for i := 0; i < 3; i++ {
		p.Update(6)
	}
	if ui := p.State().I; ui < 30.2-3*1.6-1e-9 || ui > 30.2 {
		t.Fatalf("integral %v after the hold, want 30.2 − 3 × 1.6", ui)
	}
	// … and after it the release rule halves it again.
	before := p.State().I
	p.Update(6)
	if ui := p.State().I; ui > before/2+1e-9 {
		t.Fatalf("integral %v after the hold ended, want at most half of %v", ui, before)
	}
	if got := p.Preload(pinf, 3); got != p.Output() {
		t.Fatal("a non-finite preload changed the output")
	}
	if got := p.Preload(1000, 0); got != cfg.MaxSteps {
		t.Fatalf("preload above u_max gave %d", got)
	}
	p.Reset()
	if p.Output() != 0 || p.hold != 0 {
		t.Fatal("Reset kept a preload")
	}
}

// HoldIntegral: the next Update's error may not raise the integral (P
// still answers it) but may lower it; the Update after that integrates
// again.
func TestPIDHoldIntegral(t *testing.T) {
	cfg := PIDConfig{Threshold: 10, Kp: 0.8, Interval: 100e6, Ti: 200e6, MaxSteps: 80, Step: DefaultStep, ReleaseBand: 0.25, ReleaseFactor: 1}
	p := mustPID(t, cfg)
	p.Update(20) // ki·e = 0.4 × 10 per tick
	before := p.State().I
	p.HoldIntegral()
	p.Update(20)
	if s := p.State(); s.I != before || math.Abs(s.P-8) > 1e-9 {
		t.Fatalf("held tick: integral %v P %v, want %v and 8", s.I, s.P, before)
	}
	p.Update(20)
	if ui := p.State().I; math.Abs(ui-(before+4)) > 1e-9 {
		t.Fatalf("after the hold: integral %v, want %v", ui, before+4)
	}
	before = p.State().I
	p.HoldIntegral()
	p.Update(5)
	if ui := p.State().I; math.Abs(ui-(before-2)) > 1e-9 {
		t.Fatalf("held tick below the threshold: integral %v, want it to fall to %v", ui, before-2)
	}
}
