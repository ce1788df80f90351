// Package dashboard is the agent's live web page: for each shared resource,
// its read wait against the threshold, the delay the controller applies and
// the consumers' write/read rates (thesis Fig 5.13, live), a table of
// consumers sortable by rate and delay, and the agent's events (whom it
// slowed or released, and why).
//
// Its job is presentation only. It reads the agent's status through a
// Source once per second, keeps a short history so a page opened late
// still shows the last minutes, and pushes frames to browsers over
// server-sent events. It must not change anything: every endpoint is a GET,
// throttles are set only through the root-only unix socket (agent.API).
// The assets are embedded and use relative URLs, so the page works offline
// (no CDN) and behind an SSH tunnel or reverse proxy on any host and path.
//
// Imports (sanqos): agent.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/sanqos/sanqos/agent"
)

//go:embed static
var assets embed.FS

// Source returns the agent's current status (agent.Agent.Status).
type Source func() agent.Status

// Options tune the dashboard; the zero value is the agent's default.
type Options struct {
	// Period between frames (1 s).
	Period time.Duration
	// History is how many frames a new page receives first (300: five
	// minutes at 1 s).
	History int
	// Events, when set, is the agent's event history after a seq
	// (agent.Agent.Events): whom it slowed or released, and why. The
	// page lists them, fetching /api/throttle-events when a frame's
	// event_seq moves.
	Events func(since uint64) []agent.Event
}

// ResourcePoint is one resource in one frame. The wait fields are null
// (NaN) in intervals without reads: no wait measured, which is not 0 ms.
type ResourcePoint struct {
	Name         string          `json:"name"`
	IndicatorMs  agent.JSONFloat `json:"indicator_ms"`
	RawWaitMs    agent.JSONFloat `json:"raw_wait_ms"`
	ThresholdMs  agent.JSONFloat `json:"threshold_ms"`
	DelayMs      float64         `json:"delay_ms"`
	Step         int             `json:"step"`
	Throttleable int             `json:"throttleable"`
	ReadMBs      agent.JSONFloat `json:"read_mb_s"`
	WriteMBs     agent.JSONFloat `json:"write_mb_s"`
	// Writers are the write rates (MB/s) of the consumers writing to the
	// resource, so the rate chart can show who is slowed (thesis Fig 5.13).
	Writers map[string]agent.JSONFloat `json:"writers,omitempty"`
	// RateLeverStep is how far into the write-cap range the controller is;
	// Unreachable says the threshold sits on the read wait with no writer.
	RateLeverStep int  `json:"rate_lever_step,omitempty"`
	Unreachable   bool `json:"unreachable,omitempty"`
	// AtMaxDelay: at max_delay and still above the threshold.
	AtMaxDelay bool `json:"at_max_delay,omitempty"`
	// FloorMs is the read wait with no interferer (0: not known yet).
	FloorMs float64 `json:"floor_ms,omitempty"`
}

// ConsumerRow is one line of the consumers table: the consumer's rates
// summed over the resources it uses, and the delays the backend applies to
// it now, whether set by a controller or by hand (throttle set).
type ConsumerRow struct {
	Addr         string          `json:"addr"`
	Resources    []string        `json:"resources"`
	ReadMBs      agent.JSONFloat `json:"read_mb_s"`
	WriteMBs     agent.JSONFloat `json:"write_mb_s"`
	ReadDelayMs  float64         `json:"read_delay_ms"`
	WriteDelayMs float64         `json:"write_delay_ms"`
	RateCapMBs   float64         `json:"rate_cap_mb_s,omitempty"`
	// WriteCapMBs caps what the consumer writes (the second lever).
	WriteCapMBs  float64 `json:"write_cap_mb_s,omitempty"`
	Throttleable bool    `json:"throttleable"`
	Important    bool    `json:"important"`
	// Held: its delays are kept from when it last moved data, while it is
	// idle (agent hold.go, idle_hold).
	Held bool `json:"held,omitempty"`
	// Queue and the load per direction say why a consumer is slowed and
	// which way: the mean number of its requests in its busiest resource,
	// and its cost there in resource seconds per second (agent
	// saturation.go).
	Queue     float64 `json:"queue"`
	LoadRead  float64 `json:"load_read"`
	LoadWrite float64 `json:"load_write"`
}

// Frame is what the page receives every period. History frames carry no
// consumers (the table shows only the present).
type Frame struct {
	Time      time.Time       `json:"t"`
	Backend   string          `json:"backend"`
	Discovery string          `json:"discovery_error,omitempty"`
	Resources []ResourcePoint `json:"resources"`
	Consumers []ConsumerRow   `json:"consumers,omitempty"`
	// EventSeq is the newest event's seq (0: none): the page fetches the
	// events when it moves, not every frame.
	EventSeq uint64 `json:"event_seq,omitempty"`
}

// Dashboard samples a Source and serves the page.
type Dashboard struct {
	src  Source
	opts Options

	mu      sync.Mutex
	ring    []Frame // oldest first, without consumers
	last    Frame
	evSeq   uint64 // the newest event's seq seen
	subs    map[chan Frame]struct{}
	started bool
}

// New returns a dashboard over src; call Run to start sampling.
func New(src Source, o Options) *Dashboard {
	if o.Period <= 0 {
		o.Period = time.Second
	}
	if o.History <= 0 {
		o.History = 300
	}
	return &Dashboard{src: src, opts: o, subs: map[chan Frame]struct{}{}}
}

// Run samples the source every period until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.opts.Period)
	defer t.Stop()
	for {
		d.Sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample takes one frame now, stores it and sends it to every open page.
// Run calls it each period; tests call it to step time.
func (d *Dashboard) Sample() Frame {
	f := FrameOf(d.src())
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opts.Events != nil {
		if evs := d.opts.Events(d.evSeq); len(evs) > 0 {
			d.evSeq = evs[len(evs)-1].Seq
		}
		f.EventSeq = d.evSeq
	}
	h := f
	h.Consumers = nil
	d.ring = append(d.ring, h)
	if len(d.ring) > d.opts.History {
		d.ring = d.ring[len(d.ring)-d.opts.History:]
	}
	d.last, d.started = f, true
	for ch := range d.subs {
		select {
		case ch <- f:
		default: // a slow page misses a frame rather than stalling the others
		}
	}
	return f
}

// FrameOf condenses an agent status into a frame.
func FrameOf(s agent.Status) Frame {
	f := Frame{Time: s.Time, Backend: s.Backend, Discovery: s.Discovery, Resources: []ResourcePoint{}}
	rows := map[string]*ConsumerRow{}
	row := func(addr string) *ConsumerRow {
		if a, err := netip.ParseAddr(addr); err == nil {
			addr = a.Unmap().String()
		}
		r := rows[addr]
		if r == nil {
			r = &ConsumerRow{Addr: addr, Resources: []string{}}
			rows[addr] = r
		}
		return r
	}
	for _, rs := range s.Resources {
		p := ResourcePoint{Name: rs.Name, IndicatorMs: agent.JSONFloat(rs.IndicatorMs), RawWaitMs: agent.JSONFloat(rs.RawWaitMs), ThresholdMs: agent.JSONFloat(rs.ThresholdMs),
			DelayMs: ms(rs.Delay), Step: rs.Step, Throttleable: len(rs.Throttleable), RateLeverStep: rs.RateLeverStep, Unreachable: rs.Unreachable, AtMaxDelay: rs.AtMaxDelay, FloorMs: rs.FloorMs}
		for _, c := range rs.Consumers {
			p.ReadMBs += agent.JSONFloat(c.ReadBps / 1e6)
			p.WriteMBs += agent.JSONFloat(c.WriteBps / 1e6)
			if c.WriteBps > 0 {
				if p.Writers == nil {
					p.Writers = map[string]agent.JSONFloat{}
				}
				p.Writers[c.Addr] = agent.JSONFloat(c.WriteBps / 1e6)
			}
			r := row(c.Addr)
			r.Resources = append(r.Resources, rs.Name)
			r.ReadMBs += agent.JSONFloat(c.ReadBps / 1e6)
			r.WriteMBs += agent.JSONFloat(c.WriteBps / 1e6)
			r.Important = r.Important || c.Important
			r.Held = r.Held || c.Held
			if c.LoadRead+c.LoadWrite >= r.LoadRead+r.LoadWrite {
				r.Queue, r.LoadRead, r.LoadWrite = c.Queue, c.LoadRead, c.LoadWrite
			}
		}
		for _, c := range rs.Throttleable {
			row(c).Throttleable = true
		}
		f.Resources = append(f.Resources, p)
	}
	// The backend's list has every applied throttle, manual ones included,
	// also for consumers no resource has seen.
	for addr, set := range s.Throttles {
		r := row(addr)
		r.ReadDelayMs, r.WriteDelayMs = ms(set.ReadDelay), ms(set.WriteDelay)
		r.RateCapMBs, r.WriteCapMBs = float64(set.Rate)/1e6, float64(set.WriteRate)/1e6
	}
	for _, r := range rows {
		f.Consumers = append(f.Consumers, *r)
	}
	sort.Slice(f.Consumers, func(i, k int) bool { return f.Consumers[i].Addr < f.Consumers[k].Addr })
	return f
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Handler serves the page, its assets, /api/frame (the latest frame),
// /api/history, /api/events (SSE: the history once, then a frame per
// period) and /api/throttle-events (the agent's event history: whom it
// slowed or released, and why). Mount it at the root of the agent's HTTP listener.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	d.Register(mux)
	return mux
}

// Register adds the dashboard's routes to mux (the agent's listener, via
// its extra hook). Every route is GET: the listener stays read-only.
func (d *Dashboard) Register(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "static")
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", secure(files))
	mux.Handle("GET /static/", secure(http.StripPrefix("/static/", files)))
	mux.HandleFunc("GET /api/frame", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, d.latest())
	})
	mux.HandleFunc("GET /api/history", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, d.history())
	})
	mux.HandleFunc("GET /api/events", d.events)
	mux.HandleFunc("GET /api/throttle-events", func(w http.ResponseWriter, r *http.Request) {
		evs := []agent.Event{}
		if d.opts.Events != nil {
			evs = d.opts.Events(0)
		}
		writeJSON(w, evs)
	})
}

// secure forbids everything the page does not need: no third-party
// origins (there is no CDN and must not be), no framing.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func (d *Dashboard) latest() Frame {
	d.mu.Lock()
	f, ok := d.last, d.started
	d.mu.Unlock()
	if !ok { // asked before Run's first sample
		return d.Sample()
	}
	return f
}

func (d *Dashboard) history() []Frame {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Frame{}, d.ring...)
}

func (d *Dashboard) subscribe() (chan Frame, []Frame, Frame, bool) {
	ch := make(chan Frame, 4)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.subs[ch] = struct{}{}
	return ch, append([]Frame{}, d.ring...), d.last, d.started
}

func (d *Dashboard) unsubscribe(ch chan Frame) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.subs, ch)
}

// events streams server-sent events: "history" (a JSON array) and the
// latest "frame" once, then a "frame" per period until the page goes away.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	ch, hist, last, ok := d.subscribe()
	defer d.unsubscribe(ch)
	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := w.Write([]byte("event: " + event + "\ndata: " + string(b) + "\n\n")); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("history", hist) {
		return
	}
	// The latest full frame at once, so a new page has its consumers
	// table and header without waiting a period.
	if ok && !send("frame", last) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case f := <-ch:
			if !send("frame", f) {
				return
			}
		}
	}
}
