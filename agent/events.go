package agent

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Why, and when (issue 52, item 5): every change of whom a resource
// slows is an event — a consumer starts to be slowed, is released,
// changes direction, is held while idle, is pinned at max_delay, or is
// spared because it is important. Each carries what the operator needs
// to judge it: the resource's read wait against its threshold, the
// consumer's share of the resource's load and the direction it loads it
// in, the delays set, and the reason. Events go to the log, to
// sanqos_throttle_events_total, and into a bounded history that the
// control API (GET /v1/events), `sanqos status --events` and the
// dashboard show. They are found by diffing each tick's settings with
// the last (events_track.go), not by logging delay steps: a resource
// being regulated changes its delays every tick.

// EventKind is what changed.
type EventKind string

const (
	// EventSlow: a consumer starts to be slowed.
	EventSlow EventKind = "slow"
	// EventRelease: a slowed consumer is no longer.
	EventRelease EventKind = "release"
	// EventDirection: a slowed consumer is slowed in another direction
	// (read, write, both).
	EventDirection EventKind = "direction"
	// EventHeld: a slowed consumer went idle and keeps its delays for
	// its next burst (idle_hold).
	EventHeld EventKind = "held"
	// EventAtMax: a slowed consumer's delay reached max_delay.
	EventAtMax EventKind = "at-max"
	// EventSpared: an important consumer saturates a resource being
	// regulated, and is not slowed.
	EventSpared EventKind = "spared"
)

// EventKinds are the kinds in the order the docs list them.
var EventKinds = []EventKind{EventSlow, EventRelease, EventDirection, EventHeld, EventAtMax, EventSpared}

// Event is one change of whom a resource slows.
type Event struct {
	// Seq numbers the agent's events from 1; a client asks for those
	// after the last it saw (GET /v1/events?since=N).
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Resource string    `json:"resource"`
	Consumer string    `json:"consumer"`
	Kind     EventKind `json:"kind"`
	// IndicatorMs is the resource's read wait (EWMA; null: no reads
	// yet) and ThresholdMs its threshold, at the event.
	IndicatorMs JSONFloat `json:"indicator_ms"`
	ThresholdMs float64   `json:"threshold_ms"`
	// Share is the consumer's part of the resource's load (0–1: its
	// cost in resource time over all consumers', saturation.go), Queue
	// its mean requests in the resource, ReadMBs and WriteMBs its
	// smoothed rates.
	Share    float64 `json:"share"`
	Queue    float64 `json:"queue"`
	ReadMBs  float64 `json:"read_mb_s"`
	WriteMBs float64 `json:"write_mb_s"`
	// Direction is what it is slowed in: read, write or both ("" when
	// released or spared).
	Direction string `json:"direction,omitempty"`
	// ReadDelayMs and WriteDelayMs are its delays after the event (0
	// when released).
	ReadDelayMs  float64 `json:"read_delay_ms"`
	WriteDelayMs float64 `json:"write_delay_ms"`
	Reason       string  `json:"reason"`
}

// Text is the event in one line, as the log's fields say it: "vg1
// 10.99.0.3 slow (read 8.5 ms): read wait 23.1 ms > 15 ms, 41% of the
// load; saturates the resource: ...".
func (e Event) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", e.Resource, e.Consumer, e.Kind)
	if d := e.delays(); d != "" {
		b.WriteString(" (" + d + ")")
	} else if e.Direction != "" {
		b.WriteString(" (" + e.Direction + ")")
	}
	fmt.Fprintf(&b, ": %s, %.0f%% of the load; %s", e.Indicator(), 100*e.Share, e.Reason)
	return b.String()
}

// Indicator is the read wait against the threshold: "read wait 23.1 ms >
// 15 ms".
func (e Event) Indicator() string {
	w := float64(e.IndicatorMs)
	if math.IsNaN(w) {
		return fmt.Sprintf("no read wait yet, threshold %.3g ms", e.ThresholdMs)
	}
	op := "≤"
	if w > e.ThresholdMs {
		op = ">"
	}
	return fmt.Sprintf("read wait %.1f ms %s %.3g ms", w, op, e.ThresholdMs)
}

// delays is the event's delays ("read 8.5 ms, write 1.0 ms"; "" none).
func (e Event) delays() string {
	var p []string
	if e.ReadDelayMs > 0 {
		p = append(p, fmt.Sprintf("read %.1f ms", e.ReadDelayMs))
	}
	if e.WriteDelayMs > 0 {
		p = append(p, fmt.Sprintf("write %.1f ms", e.WriteDelayMs))
	}
	return strings.Join(p, ", ")
}

// Delays is the event's delays in words ("-" none).
func (e Event) Delays() string {
	if d := e.delays(); d != "" {
		return d
	}
	return "-"
}

// EventHistory is how many events the agent keeps (the oldest go first).
const EventHistory = 256

// eventLog is the bounded history: a ring of the last EventHistory
// events, and the count per resource and kind for the metric.
type eventLog struct {
	mu     sync.Mutex
	ring   [EventHistory]Event
	next   uint64 // the next event's Seq - 1: events so far
	counts map[eventKey]uint64
	// slowed is whom each resource slows as its events say (a slow adds
	// the pair, a release removes it), and gone the resources a reload
	// removed: their memory of whom they slow (events_track.go) goes
	// with them, and so does every resource's when the agent stops, so
	// releaseEvents releases these pairs, and a removed resource's
	// loop, which may finish one more tick, adds nothing after.
	slowed map[[2]string]bool
	gone   map[string]bool
}

type eventKey struct {
	resource string
	kind     EventKind
}

// add numbers e and keeps it; false: e's resource is gone.
func (h *eventLog) add(e Event) (Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone[e.Resource] {
		return e, false
	}
	h.keep(e)
	return h.ring[(h.next-1)%EventHistory], true
}

// keep numbers e and keeps it; h.mu is held.
func (h *eventLog) keep(e Event) {
	if h.slowed == nil {
		h.slowed = map[[2]string]bool{}
	}
	switch pair := [2]string{e.Resource, e.Consumer}; e.Kind {
	case EventSlow:
		h.slowed[pair] = true
	case EventRelease:
		delete(h.slowed, pair)
	}
	h.next++
	e.Seq = h.next
	h.ring[(h.next-1)%EventHistory] = e
	if h.counts == nil {
		h.counts = map[eventKey]uint64{}
	}
	h.counts[eventKey{e.Resource, e.Kind}]++
}

// releaseAll keeps a release event, built by mk, for each consumer
// that a resource in names (nil: every resource) still slows, in name
// order, and returns them. Named resources are gone (a reload removed
// them); nil is the agent's stop.
func (h *eventLog) releaseAll(names []string, mk func(resource, consumer string) Event) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var pairs [][2]string
	for p := range h.slowed {
		if names == nil || slices.Contains(names, p[0]) {
			pairs = append(pairs, p)
		}
	}
	slices.SortFunc(pairs, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	out := make([]Event, len(pairs))
	for i, p := range pairs {
		h.keep(mk(p[0], p[1]))
		out[i] = h.ring[(h.next-1)%EventHistory]
	}
	if h.gone == nil {
		h.gone = map[string]bool{}
	}
	for _, n := range names {
		h.gone[n] = true
	}
	return out
}

// revive takes resources a reload adds back off the gone list.
func (h *eventLog) revive(names []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range names {
		delete(h.gone, n)
	}
}

// since returns the kept events with Seq > seq, oldest first.
func (h *eventLog) since(seq uint64) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := uint64(1)
	if h.next > EventHistory {
		first = h.next - EventHistory + 1
	}
	first = max(first, seq+1)
	out := make([]Event, 0, h.next+1-min(first, h.next+1))
	for s := first; s <= h.next; s++ {
		out = append(out, h.ring[(s-1)%EventHistory])
	}
	return out
}

// last is the newest event's Seq (0: none yet).
func (h *eventLog) last() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next
}

// each calls f with every (resource, kind) count.
func (h *eventLog) each(f func(resource string, kind EventKind, n uint64)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, n := range h.counts {
		f(k.resource, k.kind, n)
	}
}

// Events returns the kept events after seq (0: all), oldest first.
func (l *Loops) Events(since uint64) []Event { return l.events.since(since) }

// LastEvent is the newest event's Seq (0: none yet): a page polls it and
// fetches the events only when it moves.
func (l *Loops) LastEvent() uint64 { return l.events.last() }

// emit keeps an event and logs it with its fields.
func (l *Loops) emit(e Event) {
	e, ok := l.events.add(e)
	if ok {
		l.logEvent(e)
	}
}

// Why a release comes from outside the resource's own tick.
const (
	releaseRemoved = "released: its resource was removed by a reload"
	releaseStopped = "released: the agent stopped and cleared every throttle"
)

// releaseEvents emits a release, saying why, for every consumer that a
// resource in names (nil: every resource) still slows by its events:
// resources that a reload removes, and every resource when the agent
// stops, end without a tick that would release them (the actuator
// clears their throttles). Named resources are gone: the events their
// loops may still send from a last tick are dropped.
func (l *Loops) releaseEvents(names []string, why string, now time.Time) {
	st := map[string]ResourceStatus{}
	for _, s := range l.Status() {
		st[s.Name] = s
	}
	for _, e := range l.events.releaseAll(names, func(res, consumer string) Event {
		return Event{Time: now, Resource: res, Consumer: consumer, Kind: EventRelease,
			IndicatorMs: JSONFloat(round2(st[res].IndicatorMs)), ThresholdMs: st[res].ThresholdMs, Reason: why}
	}) {
		l.logEvent(e)
	}
}

// logEvent logs a kept event with its fields.
func (l *Loops) logEvent(e Event) {
	wait := any("none") // no read yet: NaN is not every log format's number
	if w := float64(e.IndicatorMs); !math.IsNaN(w) {
		wait = round1(w)
	}
	l.log.Info(eventMsg[e.Kind], "resource", e.Resource, "consumer", e.Consumer, "kind", string(e.Kind),
		"read_wait_ms", wait, "threshold_ms", e.ThresholdMs, "share_pct", round1(100*e.Share),
		"queue", round1(e.Queue), "direction", e.Direction, "read_delay_ms", e.ReadDelayMs, "write_delay_ms", e.WriteDelayMs,
		"reason", e.Reason, "seq", e.Seq)
}

var eventMsg = map[EventKind]string{
	EventSlow: "slowing consumer", EventRelease: "releasing consumer", EventDirection: "slowing consumer in another direction",
	EventHeld: "holding idle consumer's delays", EventAtMax: "consumer at max_delay", EventSpared: "important consumer not slowed",
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// Events returns the agent's kept events after seq (0: all), oldest
// first (GET /v1/events).
func (a *Agent) Events(since uint64) []Event { return a.loops.Events(since) }

// LastEvent is the newest event's Seq (0: none yet).
func (a *Agent) LastEvent() uint64 { return a.loops.LastEvent() }

// eventsCollector exports sanqos_throttle_events_total{resource,kind}:
// how often the agent changed whom it slows, so an alert or a panel can
// tell a resource that slows its backup once a night from one that
// starts and releases it every few seconds.
type eventsCollector struct{ l *Loops }

var eventsDesc = prometheus.NewDesc("sanqos_throttle_events_total",
	"Changes of whom a resource slows, by kind: slow, release, direction, held, at-max, spared (sanqos status --events says why).",
	[]string{"resource", "kind"}, nil)

func (c eventsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- eventsDesc }

func (c eventsCollector) Collect(ch chan<- prometheus.Metric) {
	c.l.events.each(func(resource string, kind EventKind, n uint64) {
		ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.CounterValue, float64(n), resource, string(kind))
	})
}

// serveEvents answers GET /v1/events: the kept events after ?since=SEQ
// (all without it), oldest first; an empty list from an agent without
// resources.
func (a *API) serveEvents(w http.ResponseWriter, r *http.Request) {
	var since uint64
	if s := r.URL.Query().Get("since"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("since=%q: want an event's seq (a whole number)", s))
			return
		}
		since = n
	}
	out := []Event{}
	if a.Events != nil {
		out = a.Events(since)
	}
	writeJSON(w, http.StatusOK, out)
}

// Events returns the agent's kept events after since (0: all).
func (c *Client) Events(since uint64) ([]Event, error) {
	var out []Event
	return out, c.do(http.MethodGet, "/v1/events?since="+strconv.FormatUint(since, 10), nil, &out)
}
