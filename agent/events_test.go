package agent

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/throttle"
)

// evTick is one tick of the events stage's input: the settings after
// shape, the controller's delay, who is held, who is idle or gone.
type evTick struct {
	set   map[netip.Addr]throttle.Setting
	delay time.Duration
	held  []netip.Addr
	idle  []netip.Addr // moved nothing this tick
	gone  []netip.Addr // not in this tick's consumers
	want  []string     // "kind consumer" and, after " | ", a part of the reason
	// repeat runs the tick this many times (0: once); want is the
	// events of all of them.
	repeat int
}

func wr(d time.Duration) throttle.Setting { return throttle.Setting{WriteDelay: d} }
func rd(d time.Duration) throttle.Setting { return throttle.Setting{ReadDelay: d} }

// eventLoops is a loop config for the events stage alone: 20 ms
// max_delay, the default's saturation marks.
func eventLoops(log *slog.Logger) *Loops {
	return NewLoops(LoopConfig{Interval: 100 * time.Millisecond, DelayStep: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond,
		WriteBps: 1e6, BulkQueue: 2, ReadBps: 1e6, IdleHold: 30 * time.Second, Cost: cost.Default()}, nil, nil, log)
}

// planOf gives rs a plan of rs.in's consumers, as measure builds rs.in
// from the plan (the stages index consumers by it).
func planOf(rs *resourceState) {
	rs.plan = &plan{}
	for _, c := range rs.in.Consumers {
		rs.plan.consumers = append(rs.plan.consumers, planConsumer{addr: c.Addr})
	}
}

// runEventTicks feeds the ticks to one resource's events stage and
// returns each tick's events.
func runEventTicks(t *testing.T, l *Loops, ticks []evTick) [][]Event {
	t.Helper()
	rs := &resourceState{policy: ReadOverWrite(), held: holds{}}
	all := []ConsumerInput{
		{Addr: reader, ReadBps: 256e3, ReadEWMA: 256e3, Queue: 0.5, Load: cost.Load{Read: 0.05}},
		{Addr: writer, WriteBps: 20e6, WriteEWMA: 20e6, Queue: 3.2, Load: cost.Load{Write: 0.45}},
		{Addr: boss, Important: true, WriteBps: 20e6, WriteEWMA: 20e6, Queue: 3.0, Load: cost.Load{Write: 0.5}},
	}
	var got [][]Event
	for i, tk := range ticks {
		rs.in = PolicyInput{WriteBps: 1e6, BulkQueue: 2, ReadBps: 1e6, Consumers: rs.in.Consumers[:0]}
		for _, c := range all {
			if contains(tk.gone, c.Addr) {
				continue
			}
			if contains(tk.idle, c.Addr) {
				c.ReadBps, c.WriteBps = 0, 0
			}
			rs.in.Consumers = append(rs.in.Consumers, c)
		}
		planOf(rs)
		clear(rs.held)
		for _, a := range tk.held {
			rs.held[a] = &held{idleFor: 100 * time.Millisecond}
		}
		st := ResourceStatus{Name: "vg1", IndicatorMs: 23.1, ThresholdMs: 15, Delay: tk.delay}
		before := l.LastEvent()
		rs.set = bySlot(&rs.in, tk.set)
		for n := 0; n < max(1, tk.repeat); n++ {
			l.track(rs, "vg1", &st, time.Unix(int64(i), 0))
		}
		got = append(got, l.Events(before))
	}
	return got
}

func contains(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// The events stage emits an event for each change of whom a resource
// slows, and none for a delay that only moves: a consumer starting to be
// slowed (with the rule it meets), released (and why), changing
// direction (once the new one has lasted dirSettle ticks; a sliver on the
// lesser direction is no change), held while idle, pinned at max_delay
// (again only after falling under 90 % of it), spared as important, or
// gone from the resource.
func TestEventDiff(t *testing.T) {
	const ms5, ms20 = 5 * time.Millisecond, 20 * time.Millisecond
	w := func(d time.Duration) map[netip.Addr]throttle.Setting {
		return map[netip.Addr]throttle.Setting{writer: wr(d)}
	}
	r := func(d time.Duration) map[netip.Addr]throttle.Setting {
		return map[netip.Addr]throttle.Setting{writer: rd(d)}
	}
	slow := "slow 10.99.0.3 | saturates the resource: 3.2 requests queued ≥ throttleable_queue 2"
	for _, tc := range []struct {
		name  string
		ticks []evTick
	}{
		{"start, then only its delay moves", []evTick{
			{}, {set: w(time.Millisecond), delay: time.Millisecond, want: []string{slow}},
			{set: w(3 * time.Millisecond), delay: 3 * time.Millisecond}, {set: w(ms5), delay: ms5}}},
		{"release: resource below threshold", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{want: []string{"release 10.99.0.3 | released: resource below threshold"}}, {}}},
		{"release: no longer saturates while regulated", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{delay: ms5, want: []string{"release 10.99.0.3 | released: no longer saturates the resource"}}}},
		{"direction change after dirSettle ticks", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{set: r(ms5), delay: ms5}, {set: r(ms5), delay: ms5}, {set: r(ms5), delay: ms5}, {set: r(ms5), delay: ms5},
			{set: r(ms5), delay: ms5, want: []string{"direction 10.99.0.3 | direction changed: read, was write"}},
			{set: r(ms5), delay: ms5}}},
		{"a direction that flaps is no event", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{set: r(ms5), delay: ms5}, {set: w(ms5), delay: ms5}, {set: r(ms5), delay: ms5}, {set: w(ms5), delay: ms5},
			{set: r(ms5), delay: ms5}, {set: w(ms5), delay: ms5}}},
		{"a sliver of read delay is no direction", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms5, ReadDelay: 1 * time.Millisecond}}, delay: ms5},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms5, ReadDelay: 1 * time.Millisecond}}, delay: ms5},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms5, ReadDelay: 1 * time.Millisecond}}, delay: ms5},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms5, ReadDelay: 1 * time.Millisecond}}, delay: ms5},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms5, ReadDelay: 1 * time.Millisecond}}, delay: ms5}}},
		{"held while idle, then the hold ends", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{set: w(ms5), held: []netip.Addr{writer}, idle: []netip.Addr{writer}, want: []string{"held 10.99.0.3 | held while idle"}},
			{set: w(ms5), held: []netip.Addr{writer}, idle: []netip.Addr{writer}},
			{idle: []netip.Addr{writer}, want: []string{"release 10.99.0.3 | released: idle longer than idle_hold"}}}},
		{"held, resumed and still slowed: no event", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{set: w(ms5), held: []netip.Addr{writer}, idle: []netip.Addr{writer}, want: []string{"held 10.99.0.3 | held while idle"}},
			{set: w(ms5), delay: ms5}, {set: w(ms5), delay: ms5}}},
		{"idle again soon after resuming: one held event", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{set: w(ms5), held: []netip.Addr{writer}, idle: []netip.Addr{writer}, want: []string{"held 10.99.0.3 | held while idle"}},
			{set: w(ms5), delay: ms5}, {set: w(ms5), held: []netip.Addr{writer}, idle: []netip.Addr{writer}},
			// heldSettle ticks active since: a new held event.
			{set: w(ms5), delay: ms5, repeat: heldSettle},
			{set: w(ms5), held: []netip.Addr{writer}, idle: []netip.Addr{writer}, want: []string{"held 10.99.0.3 | held while idle"}}}},
		{"at max, with hysteresis", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms20, ReadDelay: ms20}}, delay: ms20,
				want: []string{"at-max 10.99.0.3 | pinned at max_delay 20ms"}},
			{set: w(19500 * time.Microsecond), delay: 19500 * time.Microsecond},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms20, ReadDelay: ms20}}, delay: ms20},
			{set: w(17 * time.Millisecond), delay: 17 * time.Millisecond},
			{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: ms20, ReadDelay: ms20}}, delay: ms20,
				want: []string{"at-max 10.99.0.3 | pinned at max_delay"}}}},
		{"important: spared once per regulation", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow, "spared 10.99.0.4 | important: never slowed, though it saturates the resource"}},
			{set: w(ms5), delay: ms5}, {want: []string{"release 10.99.0.3 | below threshold"}},
			{set: w(ms5), delay: ms5, want: []string{slow, "spared 10.99.0.4 | important: never slowed"}}}},
		{"gone from the resource", []evTick{
			{set: w(ms5), delay: ms5, want: []string{slow}},
			{delay: ms5, gone: []netip.Addr{writer}, want: []string{"release 10.99.0.3 | left the resource"}},
			{delay: ms5, gone: []netip.Addr{writer}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := eventLoops(slog.New(slog.NewTextHandler(io.Discard, nil)))
			got := runEventTicks(t, l, tc.ticks)
			for i, tk := range tc.ticks {
				checkEvents(t, i, got[i], tk.want)
			}
		})
	}
}

// A direction counts when its delay is the larger, or at least half of it
// and more than one step: a one-step sliver (a backup's command PDUs
// priced as writes, lab read-backup: read 1 ms, write 0.5 ms at its
// first tick) is not "both".
func TestDirectionOf(t *testing.T) {
	const step = 500 * time.Microsecond
	for _, tc := range []struct {
		s    throttle.Setting
		want string
	}{
		{throttle.Setting{}, ""},
		{rd(time.Millisecond), "read"},
		{wr(time.Millisecond), "write"},
		{throttle.Setting{ReadDelay: time.Millisecond, WriteDelay: step}, "read"},
		{throttle.Setting{ReadDelay: 15 * time.Millisecond, WriteDelay: step}, "read"},
		{throttle.Setting{ReadDelay: step, WriteDelay: step}, "both"},
		{throttle.Setting{ReadDelay: 12 * time.Millisecond, WriteDelay: 6 * time.Millisecond}, "both"},
		{throttle.Setting{ReadDelay: 12 * time.Millisecond, WriteDelay: 5 * time.Millisecond}, "read"},
		{throttle.Setting{WriteRate: 1e6}, "write"},
		{throttle.Setting{Rate: 1e6}, "read"},
	} {
		if got := directionOf(tc.s, step).String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

// checkEvents compares one tick's events with "kind consumer | reason
// part" lines, in order.
// The boss (important, as heavy as the writer) is spared whenever the
// resource is regulated: its events count only where a case wants one.
func checkEvents(t *testing.T, tick int, got []Event, want []string) {
	t.Helper()
	if !strings.Contains(strings.Join(want, "\n"), "spared") {
		var kept []Event
		for _, e := range got {
			if e.Kind != EventSpared {
				kept = append(kept, e)
			}
		}
		got = kept
	}
	if len(got) != len(want) {
		var s []string
		for _, e := range got {
			s = append(s, e.Text())
		}
		t.Fatalf("tick %d: %d events %q, want %q", tick, len(got), s, want)
	}
	for k, w := range want {
		head, reason, _ := strings.Cut(w, " | ")
		if e := got[k]; string(e.Kind)+" "+e.Consumer != head || !strings.Contains(e.Reason, reason) {
			t.Errorf("tick %d: %s %s %q, want %q", tick, e.Kind, e.Consumer, e.Reason, w)
		}
	}
}

// A slow event carries what an operator needs to judge it: the wait
// against the threshold, the consumer's share of the load and its
// direction, the delays, in one line too.
func TestEventFields(t *testing.T) {
	l := eventLoops(slog.New(slog.NewTextHandler(io.Discard, nil)))
	got := runEventTicks(t, l, []evTick{{set: map[netip.Addr]throttle.Setting{writer: {WriteDelay: 8500 * time.Microsecond}}, delay: 8500 * time.Microsecond}})
	e := got[0][0]
	if e.Seq != 1 || e.Kind != EventSlow || e.Direction != "write" || e.WriteDelayMs != 8.5 || e.ReadDelayMs != 0 || float64(e.IndicatorMs) != 23.1 ||
		e.ThresholdMs != 15 || math.Abs(e.Share-0.45) > 1e-9 || e.Queue != 3.2 || e.WriteMBs != 20 || e.Resource != "vg1" {
		t.Fatalf("event %+v", e)
	}
	want := "vg1 10.99.0.3 slow (write 8.5 ms): read wait 23.1 ms > 15 ms, 45% of the load; saturates the resource: 3.2 requests queued ≥ throttleable_queue 2"
	if e.Text() != want {
		t.Errorf("text\n %q\nwant %q", e.Text(), want)
	}
}

// The log has each event with its fields, structured.
func TestEventLogged(t *testing.T) {
	var b strings.Builder
	l := eventLoops(slog.New(slog.NewTextHandler(&b, nil)))
	runEventTicks(t, l, []evTick{{set: map[netip.Addr]throttle.Setting{writer: rd(5 * time.Millisecond)}, delay: 5 * time.Millisecond}})
	for _, want := range []string{`msg="slowing consumer"`, "resource=vg1", "consumer=10.99.0.3", "kind=slow", "read_wait_ms=23.1", "threshold_ms=15",
		"share_pct=45", "direction=read", "read_delay_ms=5", `reason="saturates the resource: 3.2 requests queued`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, b.String())
		}
	}
}

// A tick that changes nothing allocates nothing: the events stage runs
// on every tick of every resource.
func TestEventTrackNoAllocWhenSteady(t *testing.T) {
	l := eventLoops(slog.New(slog.NewTextHandler(io.Discard, nil)))
	rs := &resourceState{policy: ReadOverWrite(), held: holds{}}
	rs.in = PolicyInput{WriteBps: 1e6, BulkQueue: 2, ReadBps: 1e6, Consumers: []ConsumerInput{
		{Addr: reader, ReadBps: 256e3}, {Addr: writer, WriteBps: 20e6, WriteEWMA: 20e6, Queue: 3}}}
	st := &ResourceStatus{IndicatorMs: 20, ThresholdMs: 15, Delay: 5 * time.Millisecond}
	planOf(rs)
	rs.set = bySlot(&rs.in, map[netip.Addr]throttle.Setting{writer: wr(5 * time.Millisecond)})
	l.track(rs, "vg1", st, time.Unix(0, 0))
	if n := testing.AllocsPerRun(100, func() { l.track(rs, "vg1", st, time.Unix(0, 0)) }); n != 0 {
		t.Fatalf("%v allocations per steady tick", n)
	}
	if l.LastEvent() != 1 {
		t.Fatalf("%d events, want the one slow", l.LastEvent())
	}
}

// The history keeps the last EventHistory events, numbered, and since
// returns those after a seq; the metric counts them all.
func TestEventHistoryBounded(t *testing.T) {
	var h eventLog
	for i := 0; i < EventHistory+10; i++ {
		h.add(Event{Resource: "vg1", Kind: EventKinds[i%2], Consumer: fmt.Sprint(i)})
	}
	all := h.since(0)
	if len(all) != EventHistory || all[0].Seq != 11 || all[len(all)-1].Seq != EventHistory+10 || all[0].Consumer != "10" {
		t.Fatalf("%d kept, first %+v last %+v", len(all), all[0], all[len(all)-1])
	}
	if got := h.since(EventHistory + 8); len(got) != 2 || got[0].Seq != EventHistory+9 {
		t.Fatalf("since: %+v", got)
	}
	if got := h.since(EventHistory + 10); len(got) != 0 {
		t.Fatalf("since the last: %+v", got)
	}
	var empty eventLog
	if got := empty.since(0); len(got) != 0 || empty.last() != 0 {
		t.Fatalf("empty: %+v", got)
	}
	reg := prometheus.NewRegistry()
	l := &Loops{}
	l.events.counts = h.counts
	reg.MustRegister(eventsCollector{l})
	want := fmt.Sprintf(`
# HELP sanqos_throttle_events_total %s
# TYPE sanqos_throttle_events_total counter
sanqos_throttle_events_total{kind="release",resource="vg1"} 133
sanqos_throttle_events_total{kind="slow",resource="vg1"} 133
`, "Changes of whom a resource slows, by kind: slow, release, direction, held, at-max, spared (sanqos status --events says why).")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sanqos_throttle_events_total"); err != nil {
		t.Fatal(err)
	}
}

// GET /v1/events over the socket, through the CLI's client: all, since a
// seq, a bad since, and an agent without resources (an empty list).
func TestEventsAPI(t *testing.T) {
	var h eventLog
	for i := 0; i < 3; i++ {
		h.add(Event{Resource: "vg1", Consumer: "10.99.0.3", Kind: EventSlow, IndicatorMs: JSONFloat(math.NaN()), Reason: "r"})
	}
	for _, tc := range []struct {
		name   string
		events func(uint64) []Event
		since  uint64
		want   int
	}{
		{"all", h.since, 0, 3}, {"since 2", h.since, 2, 1}, {"no resources", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "s.sock")
			l, err := ListenUnix(sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: (&API{T: throttle.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Events: tc.events}).Handler()}
			go srv.Serve(l)
			t.Cleanup(func() { srv.Close() })
			c := NewClient(sock)
			got, err := c.Events(tc.since)
			if err != nil || len(got) != tc.want || got == nil {
				t.Fatalf("%d events (%v), want %d", len(got), err, tc.want)
			}
			if tc.want > 0 && (got[len(got)-1].Seq != 3 || !math.IsNaN(float64(got[0].IndicatorMs))) {
				t.Errorf("last %+v; an unmeasured wait must come back NaN", got[len(got)-1])
			}
			if err := c.do(http.MethodGet, "/v1/events?since=x", nil, nil); err == nil || !strings.Contains(err.Error(), "want an event's seq") {
				t.Errorf("bad since: %v", err)
			}
		})
	}
}
