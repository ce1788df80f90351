package experiments

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
)

type fakeEvents struct {
	evs []agent.Event
	err error
}

func (f fakeEvents) Events(since uint64) ([]agent.Event, error) { return f.evs, f.err }

// A regulated run keeps its agent's whole event history beside its
// traces and its digest in summary.json: the interferers named, with
// what happened to each and why; an agent that cannot answer fails the
// run rather than leaving the history out silently.
func TestRecordEvents(t *testing.T) {
	dir := t.TempDir()
	evs := []agent.Event{
		{Seq: 1, Time: time.Unix(5, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventSlow, IndicatorMs: 20.4, ThresholdMs: 15, Share: 0.28,
			Direction: "read", ReadDelayMs: 1, Reason: "saturates the resource: 3.5 requests queued ≥ throttleable_queue 1.25"},
		{Seq: 2, Time: time.Unix(11, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventHeld, IndicatorMs: 9.2, ThresholdMs: 15, Share: 0.27,
			Direction: "read", ReadDelayMs: 12, Reason: "held while idle: it keeps its delays for its next burst (idle_hold)"},
	}
	d, err := recordEvents(fakeEvents{evs: evs}, dir, "threshold-15ms")
	if err != nil {
		t.Fatal(err)
	}
	if d == nil || d.Total != 2 || len(d.Consumers) != 1 || d.Consumers[0].Consumer != "10.99.0.3" || d.Consumers[0].Kinds["held"] != 1 ||
		d.Consumers[0].Reasons["saturates the resource: N requests queued ≥ throttleable_queue N"] != 1 {
		t.Fatalf("digest %+v", d)
	}
	b, err := os.ReadFile(filepath.Join(dir, "events-threshold-15ms.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back []agent.Event
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 2 || back[1].Reason != evs[1].Reason || float64(back[0].IndicatorMs) != 20.4 {
		t.Fatalf("events file %v: %s", err, b)
	}
	if d, err := recordEvents(fakeEvents{}, dir, "none"); err != nil || d != nil {
		t.Fatalf("no events: %+v %v", d, err)
	}
	if _, err := recordEvents(fakeEvents{err: errors.New("agent gone")}, dir, "x"); err == nil {
		t.Fatal("an agent that does not answer must fail the run")
	}
}
