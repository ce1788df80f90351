package sim

// The agent's control additions on the simulated plant: the onset
// feed-forward, the rate lever, the p95 objective and the read stall.

import (
	"sort"
	"testing"
	"time"

	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// The onset feed-forward (control/onset.go), A/B on the same seeds: from
// the second load step on the controller starts each surge at the delay
// that held the last one, so the reader's first second after a step and
// its tail are better (the median over three seeds: one seed's p99 at
// 10 ms is worse), at a small cost in writes (within 5 %: at 10 ms, where
// the remembered level is the largest and the wait barely moves with
// the delay, it costs 2-4 % with max_delay 90 ms, 1.1 % when 20 ms capped
// the level). The first step has nothing to remember, so the worst
// first second is never worse with it (the same, or lower where a later
// step was the worst without it).
func TestOnsetFeedForward(t *testing.T) {
	run := func(seed uint64, yaml string) report.ControlledSummary {
		o := DefaultOptions()
		o.Scale, o.Seed, o.AgentYAML = 0.25, seed, yaml
		v, err := Run("autonomic", o)
		if err != nil {
			t.Fatal(err)
		}
		return v.(report.ControlledSummary)
	}
	var on, off [3]report.ControlledSummary
	for i := range on {
		on[i], off[i] = run(uint64(i+1), ""), run(uint64(i+1), "onset_feedforward: false")
	}
	median := func(s [3]report.ControlledSummary, k int, f func(report.ControlledRun) float64) float64 {
		v := []float64{f(s[0].Regulated[k]), f(s[1].Regulated[k]), f(s[2].Regulated[k])}
		sort.Float64s(v)
		return v[1]
	}
	onsetMs := func(r report.ControlledRun) float64 { return r.Onset.MedianMeanMs }
	p99 := func(r report.ControlledRun) float64 { return r.ReadWaitMs.P99 }
	writes := func(r report.ControlledRun) float64 { return r.WriteMBs }
	for k, r := range on[0].Regulated {
		thr := r.ThresholdMs
		if a, b := median(on, k, onsetMs), median(off, k, onsetMs); a >= b {
			t.Errorf("%v ms: median first second %v ms with feed-forward, %v without (median of 3 seeds)", thr, a, b)
		}
		if a, b := median(on, k, p99), median(off, k, p99); a > b {
			t.Errorf("%v ms: p99 %v ms with feed-forward, %v without (median of 3 seeds)", thr, a, b)
		}
		if a, b := median(on, k, writes), median(off, k, writes); a < 0.95*b {
			t.Errorf("%v ms: writes %v MB/s with feed-forward, %v without (median of 3 seeds)", thr, a, b)
		}
		for i := range on {
			if a, b := on[i].Regulated[k].Onset.WorstMeanMs, off[i].Regulated[k].Onset.WorstMeanMs; a > b {
				t.Errorf("%v ms, seed %d: the worst first second is %v ms with feed-forward, %v without", thr, i+1, a, b)
			}
		}
	}
}

// The second lever (agent/lever.go), on one seed. With max_delay 5 ms the
// delay runs out long before the 10 ms threshold is held, as 40 ms does
// at 10 ms in the lab: write caps then appear only while the delay is at
// its maximum, are gone before the delay falls, and bring p95 to the
// threshold. At 5 ms, below the reader's own wait with no writer
// (~6.3 ms), the lever stays off rather than starve the writers for
// nothing.
func TestRateLeverHandOver(t *testing.T) {
	run := func(yaml string, thr time.Duration) (*PhaseResult, report.ControlledRun) {
		o := DefaultOptions()
		o.Scale, o.AgentYAML = 0.25, yaml
		p, steps, err := controlledPhase(o, thr, true, twelveWriters)
		if err != nil {
			t.Fatal(err)
		}
		res, err := RunPhase(p, o.Params, o.Seed)
		if err != nil {
			t.Fatal(err)
		}
		return res, ControlledRunOf(res, thr, steps, o.scale(25*time.Second).Seconds())
	}
	res, lever := run("max_delay: 5ms\nrate_lever_steps: 20", 10*time.Millisecond)
	_, plain := run("max_delay: 5ms", 10*time.Millisecond)
	if lever.ReadWaitMs.P95 > 1.2*lever.ThresholdMs || plain.ReadWaitMs.P95 <= 1.2*plain.ThresholdMs {
		t.Errorf("p95 %v ms with the lever, %v without: want the lever alone within 1.2 × 10 ms", lever.ReadWaitMs.P95, plain.ReadWaitMs.P95)
	}
	capped := 0
	for i, tk := range res.Ticks {
		if tk.Capped == 0 {
			continue
		}
		capped++
		if tk.Delay != 5 {
			t.Fatalf("t=%.1f s: %d writers capped at %.2f MB/s with the delay at %v ms, below its maximum", tk.T, tk.Capped, tk.CapMBs, tk.Delay)
		}
		if next := res.Ticks[min(i+1, len(res.Ticks)-1)]; next.Delay < 5 && next.Capped > 0 {
			t.Fatalf("t=%.1f s: the delay fell while caps remained", next.T)
		}
	}
	t.Logf("10 ms, max_delay 5 ms: %d of %d ticks capped; p95 %v vs %v ms, writes %v vs %v MB/s", capped, len(res.Ticks),
		lever.ReadWaitMs.P95, plain.ReadWaitMs.P95, lever.WriteMBs, plain.WriteMBs)
	if capped == 0 {
		t.Fatal("the lever never engaged")
	}
	res, _ = run("rate_lever_steps: 20", 5*time.Millisecond)
	for _, tk := range res.Ticks {
		if tk.Capped > 0 {
			t.Fatalf("t=%.1f s: writers capped at 5 ms, below the reader's own wait with no writer", tk.T)
		}
	}
}

// Objective p95 lands on the threshold, not under it: the tail factor's
// closed-loop correction (agent/objective.go) moves it by the share of
// loaded intervals over the threshold. Before it, the open-loop factor
// held the simulator's p95 at 0.97–1.00× (seeds 1–3; 0.97× at 20 ms on
// seed 1) and the lab's at 0.93–0.95× at 10 ms, which on that flat plant
// cost a sixth of the oracle's writes. Scale 1: the
// correction waits out 30 s of load and needs a load step or two more.
func TestP95ObjectiveLandsOnThreshold(t *testing.T) {
	for _, scenario := range []string{"autonomic", "read-backup"} {
		for seed := uint64(1); seed <= 3; seed++ {
			o := DefaultOptions()
			o.Scale, o.Seed = 1, seed
			v, err := Run(scenario, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range v.(report.ControlledSummary).Regulated {
				if x := r.ReadWaitMs.P95 / r.ThresholdMs; x < 0.98 || x > 1.05 {
					t.Errorf("%s, seed %d, %v ms: p95 %.2f× the threshold, want 0.98–1.05×", scenario, seed, r.ThresholdMs, x)
				}
			}
		}
	}
}

// TestReadStall: the additive-tail option adds about prob × stall to the
// reader's mean wait while another consumer is active, nothing while it
// is alone, and off it replays the model exactly; scaled by the delay it
// grows with the writers' delay.
func TestReadStall(t *testing.T) {
	const stall = 20 * time.Millisecond
	jobs := func(writer bool) []*Job {
		j := []*Job{{Consumer: HostAddr("b2"), Device: "loop0", Random: true, BS: 8192, IODepth: 1, RateBps: 256 << 10, Length: 40 * time.Second}}
		if writer {
			j = append(j, &Job{Consumer: HostAddr("b3"), Device: "loop1", Write: true, BS: 65536, IODepth: 2, Length: 40 * time.Second})
		}
		return j
	}
	wait := func(p Params, writer bool, delay time.Duration) float64 {
		m := NewModel(p, 1, []Resource{{Name: "vg1", Devices: Devices}}, jobs(writer))
		if delay > 0 {
			m.Throttle().SetDirect(HostAddr("b3"), throttle.Setting{WriteDelay: delay})
		}
		m.RunUntil(40 * time.Second)
		c, _ := m.Read("loop0")
		return float64(c["loop0"].ReadTicks) / float64(c["loop0"].Reads)
	}
	with := func(prob float64, scale time.Duration) Params {
		p := DefaultParams()
		p.ReadStall, p.ReadStallProb, p.ReadStallDelay = stall, prob, scale
		return p
	}
	tests := []struct {
		name   string
		p      Params
		writer bool
		delay  time.Duration
		lo, hi float64 // extra mean wait over the same run without the option (ms)
	}{
		{"off is the model without it", with(0, 0), true, 0, 0, 0},
		{"probability 0.1 adds about 2 ms with a writer", with(0.1, 0), true, 0, 1.2, 2.8},
		{"no stall without another consumer", with(0.1, 0), false, 0, 0, 0},
		{"delay-scaled: no delay, no stall", with(0.1, 20*time.Millisecond), true, 0, 0, 0},
		{"delay-scaled: at the scale's delay, as unscaled", with(0.1, 20*time.Millisecond), true, 20 * time.Millisecond, 1.2, 2.8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := wait(DefaultParams(), tc.writer, tc.delay)
			if d := wait(tc.p, tc.writer, tc.delay) - base; d < tc.lo-1e-9 || d > tc.hi+1e-9 {
				t.Errorf("extra wait %.3f ms, want in [%.1f, %.1f]", d, tc.lo, tc.hi)
			}
		})
	}
}
