package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
)

// The agent driven through simulated interference (the real agent's
// Step against the model, default config at 15 ms, issue 30's three
// loads at a quarter of the thesis' times): its event history names each
// interferer as slowed, in the direction it loads the pool, with the
// rule it met and the read wait above the threshold; it never slows the
// protected reader; when a load stops the interferers are held, not
// released and slowed again at every cycle; and the history is a few
// events per interferer and cycle, not one per delay step.
func TestAgentEventsNameInterferers(t *testing.T) {
	o := DefaultOptions()
	o.Scale = 0.25
	for _, tc := range []struct {
		name   string
		load   load
		dir    string // what each interferer's first slow event says
		reason string
	}{
		{"readers (backup)", backupReaders, "read", "saturates the resource"},
		{"writers", twelveWriters, "write", ""},
		{"mixed", mixedIO, "", "saturates the resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := controlledPhase(o, 15*time.Millisecond, true, tc.load)
			if err != nil {
				t.Fatal(err)
			}
			res, err := RunPhase(p, DefaultParams(), o.Seed)
			if err != nil {
				t.Fatal(err)
			}
			evs := res.AgentEvents
			var lines []string
			for _, e := range evs {
				lines = append(lines, fmt.Sprintf("%6.1f s %s", e.Time.Sub(testEpoch()).Seconds(), e.Text()))
			}
			t.Logf("%d events:\n%s", len(evs), strings.Join(lines, "\n"))
			first := map[string]agent.Event{}
			kinds := map[agent.EventKind]int{}
			for _, e := range evs {
				kinds[e.Kind]++
				if e.Consumer == HostAddr("b2").String() {
					t.Errorf("the protected reader has an event: %s", e.Text())
				}
				if _, ok := first[e.Consumer]; !ok && e.Kind == agent.EventSlow {
					first[e.Consumer] = e
				}
			}
			for _, h := range Hosts[1:] {
				e, ok := first[HostAddr(h).String()]
				if !ok {
					t.Errorf("%s (%s) never slowed", h, HostAddr(h))
					continue
				}
				if float64(e.IndicatorMs) <= e.ThresholdMs || e.ThresholdMs != 15 || e.Share <= 0 || e.Resource != "vg1" {
					t.Errorf("%s: slowed without the wait above the threshold or a share: %s", h, e.Text())
				}
				if tc.dir != "" && e.Direction != tc.dir {
					t.Errorf("%s: slowed in %q, want %q: %s", h, e.Direction, tc.dir, e.Text())
				}
				if !strings.Contains(e.Reason, tc.reason) {
					t.Errorf("%s: reason %q lacks %q", h, e.Reason, tc.reason)
				}
			}
			if kinds[agent.EventHeld] == 0 {
				t.Errorf("no interferer held when its load stopped: %v", kinds)
			}
			// Six cycles, three interferers: a start, a hold and a
			// release or two each, not one event per delay step (the
			// delays change nearly every tick of 315).
			if n := len(evs); n > 6*3*4 {
				t.Errorf("%d events: more than a few per interferer and cycle (%v)", n, kinds)
			}
			// summary.json's run digests them: the three interferers.
			if d := ControlledRunOf(res, 15*time.Millisecond, nil, o.onS()).Events; d == nil || d.Total != len(evs) || len(d.Consumers) != 3 {
				t.Errorf("summary's digest %+v", d)
			}
		})
	}
}

// testEpoch is the model's virtual time zero (NewModel's Epoch).
func testEpoch() time.Time { return NewModel(DefaultParams(), 1, nil, nil).Epoch }
