package dashboard

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/throttle"
)

func status(i int) agent.Status {
	return agent.Status{
		Backend: "dry-run", Time: time.Unix(int64(1000+i), 0),
		Resources: []agent.ResourceStatus{{
			Name: "vg1", IndicatorMs: float64(10 + i), ThresholdMs: 15, Step: i, Delay: time.Duration(i) * 500 * time.Microsecond,
			Throttleable: []string{"10.99.0.3"},
			Consumers: []agent.ConsumerStatus{
				{Addr: "10.99.0.2", ReadBps: 2e6},
				{Addr: "10.99.0.3", WriteBps: 12e6, Throttled: i > 0},
			},
		}},
		Throttles: map[string]throttle.Setting{
			"10.99.0.3": {WriteDelay: time.Duration(i) * 500 * time.Microsecond},
			"10.9.9.9":  {WriteDelay: 2 * time.Millisecond}, // manual, on no resource
		},
	}
}

func TestFrameOf(t *testing.T) {
	f := FrameOf(status(4))
	if len(f.Resources) != 1 {
		t.Fatalf("resources %+v", f.Resources)
	}
	r := f.Resources[0]
	if r.DelayMs != 2 || r.WriteMBs != 12 || r.ReadMBs != 2 || r.Throttleable != 1 || r.IndicatorMs != 14 || len(r.Writers) != 1 || r.Writers["10.99.0.3"] != 12 {
		t.Fatalf("resource point %+v", r)
	}
	got := map[string]ConsumerRow{}
	for _, c := range f.Consumers {
		got[c.Addr] = c
	}
	for _, tc := range []struct {
		addr         string
		wdelay       float64
		write        agent.JSONFloat
		throttleable bool
		resources    int
	}{
		{"10.99.0.2", 0, 0, false, 1},
		{"10.99.0.3", 2, 12, true, 1},
		{"10.9.9.9", 2, 0, false, 0}, // manual throttles show though no resource sees them
	} {
		c, ok := got[tc.addr]
		if !ok || c.WriteDelayMs != tc.wdelay || c.WriteMBs != tc.write || c.Throttleable != tc.throttleable || len(c.Resources) != tc.resources {
			t.Errorf("%s: %+v (present %v)", tc.addr, c, ok)
		}
	}
}

// A page opened late gets the history first, then live frames; the ring
// keeps only the newest History frames.
func TestEventsStreamHistoryThenFrames(t *testing.T) {
	i := 0
	d := New(func() agent.Status { i++; return status(i) }, Options{History: 3})
	for range 5 {
		d.Sample()
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	next := func() (string, string) {
		var ev, data string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			case line == "" && ev != "":
				return ev, data
			}
		}
	}
	ev, data := next()
	var hist []Frame
	if err := json.Unmarshal([]byte(data), &hist); ev != "history" || err != nil || len(hist) != 3 {
		t.Fatalf("first event %s %v: %d frames", ev, err, len(hist))
	}
	if hist[0].Resources[0].IndicatorMs != 13 || hist[2].Consumers != nil {
		t.Fatalf("history must be the newest 3 without consumers: %+v", hist)
	}
	ev, data = next()
	var latest Frame
	if err := json.Unmarshal([]byte(data), &latest); ev != "frame" || err != nil || latest.Resources[0].IndicatorMs != 15 || len(latest.Consumers) != 3 {
		t.Fatalf("second event must be the latest full frame: %s %v %+v", ev, err, latest)
	}
	// The handler subscribed before sending the history, so this sample
	// reaches it.
	d.Sample()
	ev, data = next()
	var f Frame
	if err := json.Unmarshal([]byte(data), &f); ev != "frame" || err != nil || f.Resources[0].IndicatorMs != 16 || len(f.Consumers) != 3 {
		t.Fatalf("live event %s %v: %+v", ev, err, f)
	}
}

// The listener is read-only and the page must work without internet and
// under any host or path prefix.
func TestHandlerReadOnlyAndSelfContained(t *testing.T) {
	d := New(func() agent.Status { return status(1) }, Options{})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		code         int
		contains     string
	}{
		{"GET", "/", 200, `src="static/app.js"`},
		{"GET", "/static/app.js", 200, `new EventSource("api/events")`},
		{"GET", "/static/style.css", 200, "font"},
		{"GET", "/api/frame", 200, `"backend":"dry-run"`},
		{"GET", "/api/history", 200, "["},
		{"POST", "/api/events", 405, ""},
		{"POST", "/", 405, ""},
		{"GET", "/nope", 404, ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.contains) {
			t.Errorf("%s %s: %d %.80q", tc.method, tc.path, resp.StatusCode, b)
		}
	}
	for _, name := range []string{"static/index.html", "static/app.js", "static/style.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"http://", "https://", `src="/`, `href="/`, `"//`} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s contains %q: assets must use relative URLs only", name, bad)
			}
		}
	}
}

// A consumer on two resources shows the queue and load of the one it
// loads most: where it saturates, and in which direction it is slowed.
func TestFrameOfShowsTheHeaviestLoad(t *testing.T) {
	st := agent.Status{Resources: []agent.ResourceStatus{
		{Name: "vg1", Consumers: []agent.ConsumerStatus{{Addr: "10.99.0.3", Queue: 0.3, LoadRead: 0.05}}},
		{Name: "vg2", Consumers: []agent.ConsumerStatus{{Addr: "10.99.0.3", Queue: 3.9, LoadRead: 0.26, LoadWrite: 0.11}}},
		{Name: "vg3", Consumers: []agent.ConsumerStatus{{Addr: "10.99.0.3", Queue: 1, LoadWrite: 0.1}}},
	}}
	f := FrameOf(st)
	if len(f.Consumers) != 1 {
		t.Fatalf("consumers %+v", f.Consumers)
	}
	if c := f.Consumers[0]; c.Queue != 3.9 || c.LoadRead != 0.26 || c.LoadWrite != 0.11 {
		t.Errorf("row %+v: want vg2's queue 3.9 and load 0.26 r / 0.11 w", c)
	}
}

// A consumer whose delays a resource holds while it is idle is marked
// held on its row (the page's state column says so), others not.
func TestFrameOfMarksHeld(t *testing.T) {
	st := agent.Status{Resources: []agent.ResourceStatus{
		{Name: "vg1", Consumers: []agent.ConsumerStatus{{Addr: "10.99.0.3", Throttled: true, Held: true}, {Addr: "10.99.0.4", Throttled: true}}},
		{Name: "vg2", Consumers: []agent.ConsumerStatus{{Addr: "10.99.0.3"}}},
	}}
	for _, c := range FrameOf(st).Consumers {
		if want := c.Addr == "10.99.0.3"; c.Held != want {
			t.Errorf("%s: held %v, want %v", c.Addr, c.Held, want)
		}
	}
}

// The events: a frame carries the newest event's seq, so the page fetches
// /api/throttle-events only when it moves; that route serves the agent's
// history (an empty list without one), GET only.
func TestThrottleEvents(t *testing.T) {
	var evs []agent.Event
	d := New(func() agent.Status { return status(1) }, Options{Events: func(since uint64) []agent.Event {
		var out []agent.Event
		for _, e := range evs {
			if e.Seq > since {
				out = append(out, e)
			}
		}
		return out
	}})
	if f := d.Sample(); f.EventSeq != 0 {
		t.Fatalf("no events yet, seq %d", f.EventSeq)
	}
	evs = append(evs, agent.Event{Seq: 1, Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventSlow, Reason: "saturates the resource"},
		agent.Event{Seq: 2, Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventHeld, Reason: "held while idle"})
	if f := d.Sample(); f.EventSeq != 2 {
		t.Fatalf("seq %d, want 2", f.EventSeq)
	}
	if f := d.Sample(); f.EventSeq != 2 {
		t.Fatalf("seq %d after no new event, want 2", f.EventSeq)
	}
	for _, tc := range []struct {
		d    *Dashboard
		want int
	}{{d, 2}, {New(func() agent.Status { return status(1) }, Options{}), 0}} {
		srv := httptest.NewServer(tc.d.Handler())
		resp, err := http.Get(srv.URL + "/api/throttle-events")
		if err != nil {
			t.Fatal(err)
		}
		var got []agent.Event
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got == nil || len(got) != tc.want {
			t.Errorf("%d events (%v), want %d", len(got), err, tc.want)
		}
		resp.Body.Close()
		if resp, err := http.Post(srv.URL+"/api/throttle-events", "text/plain", nil); err != nil || resp.StatusCode != 405 {
			t.Errorf("POST: %v %v", resp.StatusCode, err)
		}
		srv.Close()
	}
}
