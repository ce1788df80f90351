package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// tickBatch is one batch the backend got, and the tick that sent it
// (the release: the last tick).
type tickBatch struct {
	tick  int
	batch map[netip.Addr]throttle.Setting
}

func (b tickBatch) String() string {
	keys := slices.SortedFunc(maps.Keys(b.batch), netip.Addr.Compare)
	var sb strings.Builder
	fmt.Fprintf(&sb, "tick %d:", b.tick)
	for _, c := range keys {
		fmt.Fprintf(&sb, " %v=%+v", c, b.batch[c])
	}
	return sb.String() + "\n"
}

// tickRecorder is a throttle that records every batch with its tick.
type tickRecorder struct {
	*throttle.Memory
	tick    int
	batches []tickBatch
}

func (r *tickRecorder) Set(s map[netip.Addr]throttle.Setting) error {
	r.batches = append(r.batches, tickBatch{r.tick, maps.Clone(s)})
	return r.Memory.Set(s)
}

// recordedPools are three resources on the recorded lab runs
// (testdata/stages), each on its own four devices, all used by the same
// four hosts (b2 the reader, b3..b5 the interferers): backup, whose
// interferers read; writers, whose interferers write; mixed, whose
// interferers do both. Each resource has another policy. A host is a
// consumer of all three, so the tick merges its settings.
const recordedPools = `backend: dry-run
resources:
  - name: backup
    threshold: 10ms
    devices: [bk0, bk1, bk2, bk3]
  - name: writers
    threshold: 10ms
    policy: important-sets
    important: [10.99.0.2]
    devices: [wr0, wr1, wr2, wr3]
  - name: mixed
    threshold: 8ms
    policy: weighted
    weights: {10.99.0.3: 1, 10.99.0.4: 2, 10.99.0.5: 4}
    devices: [mx0, mx1, mx2, mx3]
`

// recordedPoolInput is the three runs' counters tick by tick (as long
// as the shortest), under their resources' device names, and the
// topology that maps them.
func recordedPoolInput(t *testing.T) ([]map[string]sample.Counters, *Topology) {
	t.Helper()
	topo := &Topology{Resources: map[string]ResourceView{}}
	var snaps []map[string]sample.Counters
	for _, pool := range []struct{ name, prefix, fixture string }{
		{"backup", "bk", "read-backup-baseline.csv"}, {"writers", "wr", "writers-baseline.csv"}, {"mixed", "mx", "mixed-baseline.csv"},
	} {
		runs := cumulative(loadRecorded(t, "testdata/stages/"+pool.fixture))
		if snaps == nil {
			snaps = make([]map[string]sample.Counters, len(runs))
			for k := range snaps {
				snaps[k] = map[string]sample.Counters{}
			}
		}
		snaps = snaps[:min(len(snaps), len(runs))]
		for k := range snaps {
			for dev, c := range runs[k] {
				c.Device = pool.prefix + strings.TrimPrefix(dev, "loop")
				snaps[k][c.Device] = c
			}
		}
		view := ResourceView{Consumers: map[netip.Addr][]string{}}
		for i, h := range stageHosts {
			dev := fmt.Sprintf("%s%d", pool.prefix, i)
			view.Devices = append(view.Devices, dev)
			view.Consumers[stageAddr[h]] = []string{dev}
		}
		topo.Resources[pool.name] = view
	}
	return snaps, topo
}

// recordedAgent is the daemon's agent (agent.New with the real PID and
// EWMA) on the recorded input, with a recording throttle.
func recordedAgent(t *testing.T, yaml string, snaps []map[string]sample.Counters, topo *Topology) (*Agent, *tickRecorder) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	rec := &tickRecorder{Memory: throttle.NewMemory()}
	a := New(cfg, Deps{Throttle: rec, Sampler: &seqSampler{snaps: snaps}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewController: NewPID, NewSmoother: NewEWMA})
	a.SetTopology(topo)
	return a, rec
}

// daemon runs a's loop as Run does, on ticks the test sends and a clock
// that reads tick k as epoch + k intervals; every tick sent is done when
// its send on ticked returns.
type daemon struct {
	ticks  chan time.Time
	ticked chan struct{}
	stop   context.CancelFunc
	done   chan struct{}
}

func startDaemon(a *Agent, rec *tickRecorder) *daemon {
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{ticks: make(chan time.Time), ticked: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	a.loops.OnTick(func(time.Duration) { d.ticked <- struct{}{} })
	clock := func() time.Time {
		rec.tick++
		return time.Unix(0, int64(rec.tick)*int64(a.cfg.Interval))
	}
	go func() { a.loops.run(ctx, d.ticks, clock); close(d.done) }()
	return d
}

// tick runs one tick of the daemon's loop and waits for its end.
func (d *daemon) tick() {
	d.ticks <- time.Time{}
	<-d.ticked
}

// end stops the loop and waits for its release.
func (d *daemon) end() {
	d.stop()
	<-d.done
}

// The daemon's loop and Step, on the same recorded input of three
// resources with three policies in three directions, send the backend
// the very same batches at the very same ticks, one batch a tick at
// most, and the same release at the end.
func TestRunMatchesStep(t *testing.T) {
	snaps, topo := recordedPoolInput(t)
	ran, ranRec := recordedAgent(t, recordedPools, snaps, topo)
	d := startDaemon(ran, ranRec)
	for range snaps {
		d.tick()
	}
	d.end()
	stepped, stepRec := recordedAgent(t, recordedPools, snaps, topo)
	for k := range snaps {
		stepRec.tick = k + 1
		if err := stepped.Step(time.Unix(0, int64(k+1)*int64(stepped.cfg.Interval))); err != nil {
			t.Fatal(err)
		}
	}
	stepped.Release() // labelled the last tick, as at the daemon's stop
	if !reflect.DeepEqual(ranRec.batches, stepRec.batches) {
		t.Fatalf("the daemon's loop sent\n%v\nStep sent\n%v", ranRec.batches, stepRec.batches)
	}
	var reads, writes, merged bool
	for i, b := range stepRec.batches {
		if i > 0 && stepRec.batches[i-1].tick == b.tick {
			t.Errorf("tick %d sent more than one batch", b.tick)
		}
		for c, s := range b.batch {
			reads, writes = reads || s.ReadDelay > 0, writes || s.WriteDelay > 0
			merged = merged || consumerSlowedBy(stepped, c.String()) > 1
		}
	}
	// What makes the comparison worth having: the ticks slowed reads and
	// writes, and a consumer by several resources at once.
	if !reads || !writes || !merged || len(stepRec.batches) < 5 {
		t.Errorf("%d batches, read delays %v, write delays %v, merged %v: the input no longer exercises the tick", len(stepRec.batches), reads, writes, merged)
	}
	if left := ranRec.List(); len(left) != 0 {
		t.Errorf("the daemon's loop left %v throttled", left)
	}
}

// consumerSlowedBy is how many resources slow consumer now.
func consumerSlowedBy(a *Agent, consumer string) int {
	n := 0
	for _, r := range a.Resources() {
		for _, c := range r.Consumers {
			if c.Addr == consumer && c.Throttled {
				n++
			}
		}
	}
	return n
}

// A reload between two ticks is run whole by the next one: its new
// threshold, policy and important consumers together. The writers' run
// is throttled under read-over-write at 10 ms; a reload to
// important-sets at 12 ms with b3 important leaves b3 unthrottled in the
// next tick's batch while b4 and b5 stay slowed, and the status and the
// controller carry the new threshold.
func TestReloadBetweenTicksRunsWhole(t *testing.T) {
	const before = "backend: dry-run\nresources:\n  - name: vg1\n    threshold: 10ms\n    devices: [loop0, loop1, loop2, loop3]\n"
	const after = "backend: dry-run\nresources:\n  - name: vg1\n    threshold: 12ms\n    policy: important-sets\n    important: [10.99.0.2, 10.99.0.3]\n    devices: [loop0, loop1, loop2, loop3]\n"
	ticks := loadRecorded(t, "testdata/stages/writers-baseline.csv")
	view := ResourceView{Consumers: map[netip.Addr][]string{}}
	for i, h := range stageHosts {
		dev := fmt.Sprintf("loop%d", i)
		view.Devices = append(view.Devices, dev)
		view.Consumers[stageAddr[h]] = []string{dev}
	}
	a, rec := recordedAgent(t, before, cumulative(ticks), &Topology{Resources: map[string]ResourceView{"vg1": view}})
	d := startDaemon(a, rec)
	defer d.end()
	b3, b4, b5 := stageAddr["b3"], stageAddr["b4"], stageAddr["b5"]
	for rec.List()[b3].IsZero() {
		if rec.tick == len(ticks)-1 {
			t.Fatal("the recorded writers were never throttled before the reload")
		}
		d.tick()
	}
	nc, err := config.Parse([]byte(after))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(nc); err != nil {
		t.Fatal(err)
	}
	reloadedAt := rec.tick + 1
	d.tick()
	st := a.Resources()[0]
	if st.Policy != "important-sets" || st.ThresholdMs != 12 {
		t.Errorf("the tick after the reload ran policy %q at %v ms, want important-sets at 12 ms", st.Policy, st.ThresholdMs)
	}
	if p, ok := a.loops.states["vg1"].ctrl.(*control.PID); !ok || p.Config().Threshold != 12 {
		t.Errorf("the controller after the reload: %#v, want a PID at 12 ms", a.loops.states["vg1"].ctrl)
	}
	last := rec.batches[len(rec.batches)-1]
	if s, ok := last.batch[b3]; last.tick != reloadedAt || !ok || !s.IsZero() {
		t.Errorf("the tick after the reload sent %+v at tick %d, want b3 cleared at tick %d", last.batch, last.tick, reloadedAt)
	}
	if applied := rec.List(); applied[b4].IsZero() || applied[b5].IsZero() {
		t.Errorf("after the reload the backend has %v, want b4 and b5 still slowed", applied)
	}
}
