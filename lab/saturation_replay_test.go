package lab

import (
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// replayAgent replays one recorded phase through the agent's own loop
// with cfg (the lab's topology: each host its own LUN), calling check
// after every tick with what the agent applied. With wire, the trace's
// per-host rates also stand in for TCP_INFO.
func replayAgent(t *testing.T, fixture, phase, cfgYAML string, wire bool, check func(t *testing.T, at float64, set map[netip.Addr]throttle.Setting, st agent.ResourceStatus)) {
	t.Helper()
	dir := gunzipFixture(t, fixture)
	rs, err := LoadTrace(filepath.Join(dir, "trace.csv"), []*Phase{{Name: phase}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 || len(rs[0].Ticks) == 0 {
		t.Fatalf("%s: no phase %s", fixture, phase)
	}
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	rp := &traceReplay{res: rs[0], epoch: time.Unix(1e9, 0), cum: map[string]sample.Counters{}}
	mem := throttle.NewMemory()
	deps := agent.Deps{Throttle: mem, Sampler: rp, NewController: agent.NewPID, NewSmoother: agent.NewEWMA,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if wire {
		deps.Rates = rp
	}
	a := agent.New(cfg, deps)
	view := agent.ResourceView{Consumers: map[netip.Addr][]string{}}
	for i, h := range Hosts {
		dev := "loop" + string(rune('0'+i))
		view.Devices = append(view.Devices, dev)
		view.Consumers[HostAddr(h)] = []string{dev}
	}
	a.SetTopology(&agent.Topology{Resources: map[string]agent.ResourceView{"vg1": view}})
	for rp.advance() {
		at := rs[0].Ticks[rp.i-1].T
		if err := a.Step(rp.epoch.Add(time.Duration(at * float64(time.Second)))); err != nil {
			t.Fatal(err)
		}
		check(t, at, mem.List(), a.Status().Resources[0])
	}
}

// The default policy's direction choice on recorded lab runs, with the
// default config (threshold only, nothing named): the agent slows the
// interferers in the direction they load the resource and never the
// reader b2. Replayed runs are unregulated phases, so the replayed
// controller soon pins at max_delay, where every slowed consumer gets
// both directions (saturation.go); the direction is judged on the ticks
// below it.
func TestDefaultPolicyDirectionOnRecordedRuns(t *testing.T) {
	for _, tc := range []struct {
		name, fixture, phase string
		// want is each interferer's direction: "read" or "write".
		want map[string]string
	}{
		{"thesis writers (autonomic, agent off)", "testdata/autonomic-run", "baseline",
			map[string]string{"b3": "write", "b4": "write", "b5": "write"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxDelay = 40 * time.Millisecond
			seen := map[string]int{}
			replayAgent(t, tc.fixture, tc.phase, "backend: dry-run\nthreshold: 15ms\nmax_delay: 40ms\nresources:\n  - name: vg1\n", false,
				func(t *testing.T, at float64, set map[netip.Addr]throttle.Setting, st agent.ResourceStatus) {
					if s, ok := set[HostAddr("b2")]; ok {
						t.Fatalf("t=%.1f s: the reader is slowed: %+v", at, s)
					}
					for h, dir := range tc.want {
						s := set[HostAddr(h)]
						if s.IsZero() || (s.ReadDelay == maxDelay && s.WriteDelay == maxDelay) {
							continue
						}
						seen[h]++
						if (dir == "read") != (s.ReadDelay > 0) || (dir == "write") != (s.WriteDelay > 0) {
							t.Errorf("t=%.1f s: %s slowed %+v, want only its %ss", at, h, s, dir)
						}
					}
				})
			for h := range tc.want {
				if seen[h] == 0 {
					t.Errorf("%s was never slowed below max_delay: nothing judged", h)
				}
			}
			t.Logf("ticks judged per interferer: %v", seen)
		})
	}
}
