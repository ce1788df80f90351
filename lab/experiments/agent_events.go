package experiments

import (
	"path/filepath"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// The agent's events over a regulated run (issue 52: "the event history
// after a lab run, naming the interferers and why"): the whole history
// goes beside the run's traces as events-PHASE.json, and its digest into
// summary.json's run (report.ThrottleEvents).

// eventSource is what a run's events come from: the lab's agent over its
// socket (lab.LabAgent).
type eventSource interface {
	Events(since uint64) ([]agent.Event, error)
}

// recordEvents writes a's events to dir/events-PHASE.json and returns
// their digest (nil: none).
func recordEvents(a eventSource, dir, phase string) (*report.ThrottleEvents, error) {
	evs, err := a.Events(0)
	if err != nil {
		return nil, err
	}
	if err := lab.WriteJSON(filepath.Join(dir, "events-"+phase+".json"), evs); err != nil {
		return nil, err
	}
	return digestEvents(evs), nil
}

// digestEvents is report's digest of agent events.
func digestEvents(evs []agent.Event) *report.ThrottleEvents {
	recs := make([]report.EventRecord, len(evs))
	for i, e := range evs {
		recs[i] = report.EventRecord{Consumer: e.Consumer, Kind: string(e.Kind), Direction: e.Direction, Reason: e.Reason}
	}
	return report.DigestEvents(recs)
}
