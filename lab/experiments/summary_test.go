package experiments

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// The fixture is trace.csv of a real interference run (scale 0.1) in this
// lab. The expected figures come from an independent computation over the
// same CSV (testdata/interference-run/oracle.py, standard-library Python).
func TestInterferenceSummaryFromRecordedTrace(t *testing.T) {
	lead, wrun := 6*time.Second, 6500*time.Millisecond
	var phases []*lab.Phase
	for _, n := range InterferenceWriters {
		phases = append(phases, &lab.Phase{Name: fmt.Sprintf("writers-%d", n), Label: fmt.Sprintf("%d writers", n), From: lead, To: lead + wrun})
	}
	rs, err := lab.LoadTrace("testdata/interference-run/trace.csv", phases)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d phase results, want 4", len(rs))
	}
	got, series := SummarizeInterference(phases, rs)
	want := []struct {
		writers                    int
		n                          int
		mean, p50, p95, max, write float64
	}{
		{0, 65, 6.397, 6.333, 6.667, 7.0, 0},
		{1, 65, 6.640, 6.667, 7.25, 7.333, 20.234},
		{3, 65, 9.566, 9.667, 10.634, 10.667, 27.899},
		{12, 65, 25.461, 26.333, 27.266, 38.0, 27.769},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 0.006 } // summary rounds to 0.01
	for i, w := range want {
		g := got.Runs[i]
		if g.Writers != w.writers || g.ReadWaitMs.N != w.n || !near(g.ReadWaitMs.Mean, w.mean) || !near(g.ReadWaitMs.P50, w.p50) ||
			!near(g.ReadWaitMs.P95, w.p95) || !near(g.ReadWaitMs.Max, w.max) || !near(g.WriteMBs, w.write) {
			t.Errorf("writers %d: got %+v, want %+v", w.writers, g, w)
		}
	}
	if !near(got.P95Ratio12, math.Round(27.266/6.667*100)/100) {
		t.Errorf("p95 ratio %v", got.P95Ratio12)
	}
	if len(series) != 4 {
		t.Errorf("%d plot series", len(series))
	}
}

// The summary's lateness is in ms at the histogram's resolution, with the
// exact maximum, so a starved delay line reads as such in summary.json.
func TestLateSummary(t *testing.T) {
	var l throttle.Lateness
	l.Counts[1], l.Counts[5], l.Counts[len(throttle.LateBounds)] = 98, 1, 1 // ≤100 µs, ≤2 ms, >16 ms
	l.Count, l.Max = 100, 23456*time.Microsecond
	got := *lateSummary(l)
	want := report.LateSummary{P50: 0.1, P99: 2, Max: 23.456, PctOver2: 1, Releases: 100}
	if got != want {
		t.Errorf("lateSummary = %+v, want %+v", got, want)
	}
}

// --agent-set may name the regulating agent's backend (the write-cap
// lever needs delayline+htb); the shadow agent keeps dry-run, and both
// configs are valid as written.
func TestAgentConfigBackendOverride(t *testing.T) {
	o := Options{AgentYAML: "backend: delayline+htb\nrate_lever_steps: 20"}
	r := wrap(lab.PlanRunner(nil, &lab.Resource{Name: "vg1"}, o.RunOptions), o)
	dir := t.TempDir()
	for _, tc := range []struct{ backend, want string }{{"delayline", "delayline+htb"}, {"dry-run", "dry-run"}} {
		p := filepath.Join(dir, tc.backend+".yaml")
		if err := r.writeAgentConfig(p, tc.backend, "127.0.0.1:9311", 10*time.Millisecond, true); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(p)
		if err != nil {
			b, _ := os.ReadFile(p)
			t.Fatalf("%s: %v\n%s", tc.backend, err, b)
		}
		if cfg.Backend != tc.want || cfg.RateLeverSteps != 20 || cfg.MaxDelay != config.Defaults().MaxDelay {
			t.Errorf("%s: backend %q, lever %d, max delay %v", tc.backend, cfg.Backend, cfg.RateLeverSteps, cfg.MaxDelay)
		}
	}
}

// The autonomic agent runs the product's defaults, whatever the load:
// its config sets the threshold and what the lab must (backend, HTTP,
// discovery), and leaves the controller's settings to config.Defaults;
// --agent-set still wins.
func TestAgentConfigDefaults(t *testing.T) {
	def := config.Defaults()
	for _, tc := range []struct {
		set  string
		want time.Duration
	}{
		{"", def.MaxDelay},
		{"max_delay: 70ms", 70 * time.Millisecond},
	} {
		o := Options{AgentYAML: tc.set}
		r := wrap(lab.PlanRunner(nil, &lab.Resource{Name: "vg1"}, o.RunOptions), o)
		cfg := writtenConfig(t, r, 15*time.Millisecond, true)
		if cfg.MaxDelay != tc.want || cfg.Objective != def.Objective || cfg.DelayStep != def.DelayStep || cfg.PID != def.PID {
			t.Errorf("--agent-set %q: max_delay %v objective %s step %v pid %+v, want max_delay %v and the defaults",
				tc.set, cfg.MaxDelay, cfg.Objective, cfg.DelayStep, cfg.PID, tc.want)
		}
	}
}

// --lun-map names each host's own LUN in the autonomic agent's config,
// which parses and maps every host to its loop device alone.
func TestAgentConfigLUNMap(t *testing.T) {
	res := &lab.Resource{Name: "vg1"}
	for i, h := range lab.Hosts {
		res.LUNs = append(res.LUNs, lab.LUN{Host: h, Number: i + 1, Loop: fmt.Sprintf("loop%d", i)})
	}
	for _, lunMap := range []bool{false, true} {
		r := wrap(lab.PlanRunner(nil, res, lab.RunOptions{}), Options{LUNMap: lunMap})
		got := writtenConfig(t, r, 15*time.Millisecond, true).Resources[0].ConsumerDevices
		if !lunMap {
			if len(got) != 0 {
				t.Errorf("without --lun-map: consumer_devices %v", got)
			}
			continue
		}
		for i, h := range lab.Hosts {
			if d := got[lab.HostAddr(h).String()]; len(d) != 1 || d[0] != fmt.Sprintf("loop%d", i) {
				t.Errorf("%s: devices %v, want [loop%d]", h, d, i)
			}
		}
	}
}

// On a modelled disk slower than the default (the stock-kernel guest's
// 4 MB/s), the agent's heavy-writer floor scales with it; on the
// default disk the agent's own default stays.
func TestAgentWriteFloorFollowsTheDisk(t *testing.T) {
	for _, tc := range []struct {
		bw   float64
		want float64
	}{{4e6, 0.1}, {lab.DefaultOptions().Model.Bandwidth, config.Defaults().WriteMBs}} {
		o := lab.DefaultOptions()
		o.Model.Bandwidth = tc.bw
		r := wrap(lab.PlanRunner(&lab.State{Options: o}, &lab.Resource{Name: "vg1"}, lab.RunOptions{}), Options{})
		if cfg := writtenConfig(t, r, 40*time.Millisecond, true); cfg.WriteMBs != tc.want {
			t.Errorf("disk %g B/s: throttleable_write_mb_s %g, want %g", tc.bw, cfg.WriteMBs, tc.want)
		}
	}
}

// The reader's latency at the initiator pools a phase's repeats, each over
// its window (the read at 0.5 s is the lead's); where no read was logged
// (runs recorded before, the simulator's) there is none.
func TestInitiatorPoolsRepeats(t *testing.T) {
	p := &lab.Phase{From: time.Second, To: 2 * time.Second}
	r0 := &lab.PhaseResult{Phase: p, Reader: []lab.ReaderIO{{T: 0.5, Ms: 99}, {T: 1.05, Ms: 4}, {T: 1.08, Ms: 6}, {T: 1.5, Ms: 10}}}
	r1 := &lab.PhaseResult{Phase: p, Repeat: 1, Reader: []lab.ReaderIO{{T: 1.2, Ms: 8}}}
	in := initiator(r0, r1)
	if in == nil || in.ReadMs.N != 4 || in.ReadMs.Max != 10 || in.WindowMs.N != 3 || in.WindowMs.P50 != 8 || in.WindowMs.Max != 10 {
		t.Errorf("initiator %+v: want 4 reads (max 10 ms), 3 windows of 5, 10 and 8 ms", in)
	}
	if in := initiator(&lab.PhaseResult{Phase: p}); in != nil {
		t.Errorf("no reads logged: %+v, want none", in)
	}
}

// The pid agent's config (and the device fault's, with an extra device)
// names the LUNs' devices statically, b2 important and the other hosts
// throttleable.
func TestStaticAgentConfig(t *testing.T) {
	res := &lab.Resource{Name: "vg1"}
	for i, h := range lab.Hosts {
		res.LUNs = append(res.LUNs, lab.LUN{Host: h, Number: i + 1, Loop: fmt.Sprintf("loop%d", i)})
	}
	r := wrap(lab.PlanRunner(nil, res, lab.RunOptions{}), Options{})
	cfg := writtenConfig(t, r, 15*time.Millisecond, false)
	got := cfg.Resources[0]
	if cfg.Discovery.Source != "static" || strings.Join(got.Devices, ",") != "loop0,loop1,loop2,loop3" ||
		strings.Join(got.Important, ",") != "10.99.0.2" || strings.Join(got.Throttleable, ",") != "10.99.0.3,10.99.0.4,10.99.0.5" {
		t.Errorf("static config: source %s, resource %+v", cfg.Discovery.Source, got)
	}
	if y := r.staticResourceYAML("loop9"); !strings.Contains(y, "devices: [loop0, loop1, loop2, loop3, loop9]") {
		t.Errorf("with an extra device:\n%s", y)
	}
}

// writtenConfig is the delay-line agent's config r writes for threshold
// thr, loaded as the agent would.
func writtenConfig(t *testing.T, r *runner, thr time.Duration, autonomic bool) *config.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := r.writeAgentConfig(p, "delayline", "127.0.0.1:9311", thr, autonomic); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		b, _ := os.ReadFile(p)
		t.Fatalf("%v\n%s", err, b)
	}
	return cfg
}
