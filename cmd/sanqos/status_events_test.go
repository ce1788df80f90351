package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/throttle"
)

// testEvents is what serveAPI's agent answers GET /v1/events with: a
// backup host slowed, its direction changed, held and released, and an
// important consumer spared.
var testEvents = []agent.Event{
	{Seq: 1, Time: time.Unix(1000, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventSlow, IndicatorMs: 23.1, ThresholdMs: 15,
		Share: 0.41, Queue: 3.9, Direction: "read", ReadDelayMs: 1, Reason: "saturates the resource: 3.9 requests queued ≥ throttleable_queue 2"},
	{Seq: 2, Time: time.Unix(1001, 0), Resource: "vg1", Consumer: "10.99.0.4", Kind: agent.EventSpared, IndicatorMs: 22, ThresholdMs: 15,
		Share: 0.3, Reason: "important: never slowed, though it writes 20.0 MB/s > throttleable_write_mb_s 8"},
	{Seq: 3, Time: time.Unix(1005, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventDirection, IndicatorMs: 16, ThresholdMs: 15,
		Share: 0.45, Direction: "both", ReadDelayMs: 12, WriteDelayMs: 12, Reason: "direction changed: both, was read (its load: 60% reads)"},
	{Seq: 4, Time: time.Unix(1030, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventHeld, IndicatorMs: 9, ThresholdMs: 15,
		Share: 0.45, Direction: "both", ReadDelayMs: 12, WriteDelayMs: 12, Reason: "held while idle: it keeps its delays for its next burst (idle_hold)"},
	{Seq: 5, Time: time.Unix(1070, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventRelease, IndicatorMs: agent.JSONFloat(math.NaN()), ThresholdMs: 15,
		Reason: "released: idle longer than idle_hold"},
}

// status --events: one row per event, oldest first, each with its
// delays, the wait against the threshold, the share and the reason;
// --json gives the API's events.
func TestStatusEvents(t *testing.T) {
	sock := serveAPI(t, testStatus)
	out, err := run(t, "status", "--events", "--socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "TIME ") {
		t.Fatalf("want a header and 5 rows:\n%s", out)
	}
	at := func(sec int64) string { return time.Unix(sec, 0).Local().Format("01-02 15:04:05.0") }
	for i, want := range [][]string{
		{at(1000), "vg1", "10.99.0.3", "slow", "read 1.0 ms", "read wait 23.1 ms > 15 ms", "41%", "saturates the resource: 3.9 requests queued ≥ throttleable_queue 2"},
		{at(1001), "vg1", "10.99.0.4", "spared", "-", "read wait 22.0 ms > 15 ms", "30%", "important: never slowed"},
		{at(1005), "vg1", "10.99.0.3", "direction", "read 12.0 ms, write 12.0 ms", "read wait 16.0 ms > 15 ms", "45%", "direction changed: both, was read"},
		{at(1030), "vg1", "10.99.0.3", "held", "read 12.0 ms, write 12.0 ms", "read wait 9.0 ms ≤ 15 ms", "45%", "held while idle"},
		{at(1070), "vg1", "10.99.0.3", "release", "-", "no read wait yet, threshold 15 ms", "0%", "released: idle longer than idle_hold"},
	} {
		row := lines[i+1]
		for _, cell := range want {
			if !strings.Contains(row, cell) {
				t.Errorf("row %d lacks %q:\n%s", i+1, cell, row)
			}
		}
		if !strings.HasPrefix(row, want[0]) {
			t.Errorf("row %d does not start with its time:\n%s", i+1, row)
		}
	}
	out, err = run(t, "status", "--events", "--json", "--socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	var evs []agent.Event
	if err := json.Unmarshal([]byte(out), &evs); err != nil || len(evs) != 5 || evs[0].Kind != agent.EventSlow || !math.IsNaN(float64(evs[4].IndicatorMs)) {
		t.Fatalf("JSON %v: %+v\n%s", err, evs, out)
	}
}

// An agent with no events says so (and why there may be none).
func TestStatusEventsNone(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := agent.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: (&agent.API{T: throttle.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	out, err := run(t, "status", "--events", "--socket", sock)
	if err != nil || !strings.Contains(out, "no events: the agent has slowed nobody") {
		t.Fatalf("%v:\n%s", err, out)
	}
	if _, err := run(t, "status", "--events", "--socket", filepath.Join(t.TempDir(), "none.sock")); err == nil || !strings.Contains(err.Error(), "agent not running") {
		t.Fatalf("no agent: %v", err)
	}
}
