package experiments

import (
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// replay is a recorded phase to replay through the agent.
type replay struct {
	fixture, phase, cfg string
	// wire: the trace's per-host rates stand in for TCP_INFO. shared:
	// every host is seen on every LUN (what discovery finds of the lab's
	// one tgt target) instead of its own.
	wire, shared bool
}

// replayAgent replays one recorded phase through the agent's own loop
// with cfg, calling check after every tick with what the agent applied.
func replayAgent(t *testing.T, rp0 replay, check func(t *testing.T, at float64, set map[netip.Addr]throttle.Setting, st agent.ResourceStatus)) {
	fixture, phase, cfgYAML, wire := rp0.fixture, rp0.phase, rp0.cfg, rp0.wire
	t.Helper()
	dir := gunzipFixture(t, fixture)
	rs, err := lab.LoadTrace(filepath.Join(dir, "trace.csv"), []*lab.Phase{{Name: phase}})
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
	for i, h := range lab.Hosts {
		dev := "loop" + string(rune('0'+i))
		view.Devices = append(view.Devices, dev)
		view.Consumers[lab.HostAddr(h)] = []string{dev}
	}
	if rp0.shared {
		for _, h := range lab.Hosts {
			view.Consumers[lab.HostAddr(h)] = view.Devices
		}
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
		// shared: every host on every LUN, rates from the wire.
		shared bool
		// want is each interferer's direction: "read", "write" or "both"
		// ("" never slowed).
		want map[string]string
	}{
		{"thesis writers (autonomic, agent off)", "testdata/autonomic-run", "baseline", false,
			map[string]string{"b3": "write", "b4": "write", "b5": "write"}},
		{"thesis writers on shared LUNs", "testdata/autonomic-run", "baseline", true,
			map[string]string{"b3": "write", "b4": "write", "b5": "write"}},
		// lab run read-backup --scale 0.25 (results/read-backup/20261126-080542)
		{"a backup: 12 sequential 64 KiB readers (read-backup, agent off)", "testdata/read-backup-run", "baseline", false,
			map[string]string{"b3": "read", "b4": "read", "b5": "read"}},
		{"a backup on shared LUNs: by its read rate", "testdata/read-backup-run", "baseline", true,
			map[string]string{"b3": "read", "b4": "read", "b5": "read"}},
		// lab run mixed --scale 0.25 (results/mixed/20261126-075113): a VM
		// 8 KiB 70/30, a database 8 KiB 50/50, 64 KiB 50/50; each lesser
		// direction is more than a fifth of the host's cost.
		{"VMs and a database: random reads and writes (mixed, agent off)", "testdata/mixed-run", "baseline", false,
			map[string]string{"b3": "both", "b4": "both", "b5": "both"}},
		// On shared LUNs only the wire tells them apart: the 8 KiB VM and
		// database move ~0.5 MB/s, under throttleable_read_mb_s, as the
		// reader's 0.26 does, but keep four commands each in the resource
		// (their commands on the wire × the devices' wait) to the
		// reader's one.
		{"mixed on shared LUNs: by their commands on the wire", "testdata/mixed-run", "baseline", true,
			map[string]string{"b3": "both", "b4": "both", "b5": "both"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxDelay = 40 * time.Millisecond
			seen := map[string]int{}
			cfg := "backend: dry-run\nthreshold: 15ms\nmax_delay: 40ms\nresources:\n  - name: vg1\n"
			replayAgent(t, replay{fixture: tc.fixture, phase: tc.phase, cfg: cfg, wire: tc.shared, shared: tc.shared},
				func(t *testing.T, at float64, set map[netip.Addr]throttle.Setting, st agent.ResourceStatus) {
					if s, ok := set[lab.HostAddr("b2")]; ok {
						t.Fatalf("t=%.1f s: the reader is slowed: %+v", at, s)
					}
					for h, dir := range tc.want {
						s := set[lab.HostAddr(h)]
						if dir == "" {
							if !s.IsZero() {
								t.Fatalf("t=%.1f s: %s slowed %+v, want never", at, h, s)
							}
							continue
						}
						// Pinned at max_delay with the threshold missed, the
						// policy slows the other direction too: the
						// escalation, not the direction choice judged here.
						// It shows as both delays at max_delay, or, on a
						// consumer slowed in one direction, as two equal
						// delays while they climb there together under the
						// read's rise limit (at an onset the controller's
						// memory brings it back before status says
						// at_max_delay); a mixed consumer's climb is both
						// directions, as wanted.
						escalated := st.AtMaxDelay || (max(s.ReadDelay, s.WriteDelay) == maxDelay && min(s.ReadDelay, s.WriteDelay) > 0) ||
							(dir != "both" && s.ReadDelay == s.WriteDelay)
						if s.IsZero() || escalated {
							continue
						}
						seen[h]++
						if (dir != "write") != (s.ReadDelay > 0) || (dir != "read") != (s.WriteDelay > 0) {
							t.Errorf("t=%.1f s: %s slowed %+v, want %s", at, h, s, dir)
						}
					}
				})
			for h, dir := range tc.want {
				if seen[h] == 0 && dir != "" {
					t.Errorf("%s was never slowed below max_delay: nothing judged", h)
				}
			}
			t.Logf("ticks judged per interferer: %v", seen)
		})
	}
}
