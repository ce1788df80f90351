package report

import (
	"regexp"
	"slices"
	"sort"
)

// EventRecord is one of the agent's events (agent.Event) as a run's
// digest needs it: report does not import the agent.
type EventRecord struct {
	Consumer, Kind, Direction, Reason string
}

// ThrottleEvents digests a regulated run's agent events: how many of
// each kind, and per consumer what happened to it, in which directions
// it was slowed and why, so summary.json names the interferers and the
// reasons. The whole history is beside it (events-PHASE.json).
type ThrottleEvents struct {
	Total     int              `json:"total"`
	ByKind    map[string]int   `json:"by_kind"`
	Consumers []ConsumerEvents `json:"consumers"`
}

// ConsumerEvents is one consumer's part of a run's events. Reasons
// counts each reason with its figures replaced by N ("saturates the
// resource: N requests queued ≥ throttleable_queue N"), so a run's
// reasons add up instead of listing every value.
type ConsumerEvents struct {
	Consumer   string         `json:"consumer"`
	Kinds      map[string]int `json:"kinds"`
	Directions []string       `json:"directions,omitempty"`
	Reasons    map[string]int `json:"reasons"`
}

var eventFigure = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// DigestEvents is the digest of a run's events, consumers in address
// order (nil: no events).
func DigestEvents(evs []EventRecord) *ThrottleEvents {
	if len(evs) == 0 {
		return nil
	}
	d := &ThrottleEvents{ByKind: map[string]int{}}
	by := map[string]*ConsumerEvents{}
	for _, e := range evs {
		d.Total++
		d.ByKind[e.Kind]++
		c := by[e.Consumer]
		if c == nil {
			c = &ConsumerEvents{Consumer: e.Consumer, Kinds: map[string]int{}, Reasons: map[string]int{}}
			by[e.Consumer] = c
		}
		c.Kinds[e.Kind]++
		c.Reasons[eventFigure.ReplaceAllString(e.Reason, "N")]++
		if e.Direction != "" && !slices.Contains(c.Directions, e.Direction) {
			c.Directions = append(c.Directions, e.Direction)
		}
	}
	for _, c := range by {
		d.Consumers = append(d.Consumers, *c)
	}
	sort.Slice(d.Consumers, func(i, k int) bool { return d.Consumers[i].Consumer < d.Consumers[k].Consumer })
	return d
}
