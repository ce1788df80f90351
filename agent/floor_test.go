package agent

import (
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"net/netip"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/throttle"
)

// The floor (the read wait with no interferer) is learnt only from calm
// ticks (the onset detector finds them quiet, and nobody is in the
// throttleable set) followed by floorDelay more. A slowed writer's
// ticks fall under throttleable_write_mb_s between its completions and
// look quiet, while its writes still hold the reads (LIO guest: 64 KiB
// writes at max_delay, the reader at 41 ms), and so can a load's first
// ticks: learnt there, the floor rose over the threshold, which was
// called unreachable, and the write-cap lever stayed off (a2d0309).
func TestFloorLearnsOnlyWhileNobodyIsThrottleable(t *testing.T) {
	type phase struct {
		ticks    int
		writeMBs float64 // the writer's rate: quiet for the detector under 1 MB/s
		slowed   bool    // the writer in last tick's throttleable set
		rawMs    float64 // the reader's wait
	}
	quietReader := phase{30, 0, false, 8}
	for _, tc := range []struct {
		name   string
		phases []phase
		want   float64 // the floor, ms; 0: none known
	}{
		{"the reader alone", []phase{quietReader}, 8},
		{"a writer above the rate: loaded, nothing learnt", []phase{{20, 20, false, 30}}, 0},
		{"a slowed writer's quiet ticks: the floor stays", []phase{quietReader, {60, 0.5, true, 41}}, 8},
		{"a slowed writer's quiet ticks from the start: nothing learnt", []phase{{60, 0.5, true, 41}}, 0},
		{"a load whose first ticks look quiet: not learnt", []phase{quietReader, {2, 0.5, false, 400}, {20, 20, false, 100}}, 8},
		// EWMA 0.05 over the 50 samples followed by ten calm ticks:
		// 8 + 2 × (1 − 0.95^50).
		{"released, a quiet resource's wait is learnt again", []phase{quietReader, {60, 0.5, true, 41}, {60, 0, false, 10}}, 8 + 2*(1-math.Pow(0.95, 50))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, rs := stageState(t)
			rs.onset = control.NewOnsetDetector(control.DefaultOnsetConfig(l.cfg.WriteBps))
			rs.mem = control.NewMemory(onsetMemoryAlpha)
			writer := stageAddr["b3"]
			for _, ph := range tc.phases {
				for range ph.ticks {
					rs.in.Consumers = rs.in.Consumers[:0]
					for _, pc := range rs.plan.consumers {
						c := ConsumerInput{Addr: pc.addr}
						if pc.addr == writer {
							c.WriteBps = ph.writeMBs * 1e6
						}
						rs.in.Consumers = append(rs.in.Consumers, c)
					}
					clear(rs.slowed)
					if ph.slowed {
						rs.slowed[writer] = true
					}
					st := ResourceStatus{Name: "vg1", ThresholdMs: 15, RawWaitMs: ph.rawMs}
					l.control(rs, &st, 1)
				}
			}
			f, ok := rs.floor.value()
			switch {
			case tc.want == 0 && ok:
				t.Errorf("floor %.2f ms learnt, want none", f)
			case tc.want > 0 && (!ok || math.Abs(f-tc.want) > 0.01):
				t.Errorf("floor %.2f ms (known %v), want %.2f", f, ok, tc.want)
			case ok && 15 <= unreachableMargin*f:
				t.Errorf("floor %.2f ms: the 15 ms threshold would be called unreachable", f)
			}
		})
	}
}

// The at-max and held events' reasons are the ones docs/operator-guide.md
// shows in its table of events, word for word, at the default max_delay.
func TestEventReasonsAsTheOperatorGuideShowsThem(t *testing.T) {
	page, err := os.ReadFile("../docs/operator-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	const max = 90 * time.Millisecond
	l := eventLoops(slog.New(slog.NewTextHandler(io.Discard, nil)))
	l.cfg.MaxDelay = max
	pinned := map[netip.Addr]throttle.Setting{writer: {WriteDelay: max, ReadDelay: max}}
	got := runEventTicks(t, l, []evTick{
		{set: map[netip.Addr]throttle.Setting{writer: wr(5 * time.Millisecond)}, delay: 5 * time.Millisecond},
		{set: pinned, delay: max},
		{set: pinned, held: []netip.Addr{writer}, idle: []netip.Addr{writer}},
	})
	for i, kind := range map[int]EventKind{1: EventAtMax, 2: EventHeld} {
		if len(got[i]) != 1 || got[i][0].Kind != kind {
			t.Fatalf("tick %d: events %v, want one %s", i, got[i], kind)
		}
		row := ""
		for _, line := range strings.Split(string(page), "\n") {
			if strings.HasPrefix(line, "| `"+string(kind)+"` |") {
				row = line
			}
		}
		if want := "`" + got[i][0].Reason + "`"; !strings.Contains(row, want) {
			t.Errorf("docs/operator-guide.md's %s row %q does not show the reason %s", kind, row, want)
		}
	}
}
