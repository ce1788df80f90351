// Package agent is the long-running sanqos daemon: it owns one Throttle,
// runs every resource's control loop in one synchronous tick (Step, the
// same the simulator runs), and serves the local control API
// (HTTP over a root-only unix socket) that the CLI uses.
//
// It wires the pipeline together and must not parse kernel files (sample,
// discover), implement a filter or a controller (filter, control), or talk
// netlink (throttle). What it does compute each tick is the glue between
// them, run as the stages of one tick (tick.go):
// the indicator (the read wait of the devices a policy protects), the p95
// objective's tail factor and the floor (objective.go), each consumer's
// queue and load (saturation.go, priced by package cost), the onset
// detector's signal, and the policies that turn the controller's output
// into per-consumer settings (policy_*.go).
//
// Imports (sanqos): config, control, cost, discover, filter,
// internal/quantile, internal/version, sample, throttle.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// DefaultSocket is where the agent listens for the CLI.
const DefaultSocket = "/run/sanqos/sanqos.sock"

// maxBody bounds API request bodies: a batch of 10,000 consumers fits.
const maxBody = 4 << 20

// MaxConsumers bounds one throttle batch.
const MaxConsumers = 100000

// ThrottleRequest is the body of POST /v1/throttles.
type ThrottleRequest struct {
	Consumers map[string]throttle.Setting `json:"consumers"`
}

// API serves the control endpoints over a Throttle.
type API struct {
	T   throttle.Throttle
	Log *slog.Logger
	// Status, when set, is served at GET /v1/status.
	Status func() any
	// Events, when set, is served at GET /v1/events?since=SEQ: the
	// agent's kept events after SEQ (events.go).
	Events func(since uint64) []Event
	// Reload, when set, re-reads the config file and applies it or
	// refuses it (POST /v1/reload: sanqos reload, systemctl reload).
	Reload func() (ReloadReply, error)
}

// ReloadReply is POST /v1/reload's answer when the agent applied the
// config: its resources, and those discovery could not map (why, by
// name), which the reload does not refuse: each resource stands alone.
type ReloadReply struct {
	Resources int               `json:"resources"`
	Unmapped  map[string]string `json:"unmapped,omitempty"`
}

// Handler returns the HTTP handler of the control API.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/throttles", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.T.List()) // keyed by address: netip.Addr is a TextMarshaler
	})
	mux.HandleFunc("POST /v1/throttles", func(w http.ResponseWriter, r *http.Request) {
		set, err := DecodeThrottleRequest(io.LimitReader(r.Body, maxBody))
		if err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		if err := a.T.Set(set); err != nil {
			writeErr(w, http.StatusUnprocessableEntity, err)
			return
		}
		a.Log.Info("throttle set via API", "consumers", len(set))
		writeJSON(w, http.StatusOK, map[string]int{"set": len(set)})
	})
	mux.HandleFunc("DELETE /v1/throttles", func(w http.ResponseWriter, r *http.Request) {
		var addrs []netip.Addr
		for _, c := range r.URL.Query()["consumer"] {
			a, err := netip.ParseAddr(c)
			if err != nil || a.Zone() != "" {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("consumer %q is not an IP address", c))
				return
			}
			addrs = append(addrs, a.Unmap())
		}
		if len(addrs) == 0 && r.URL.Query().Get("all") != "true" {
			writeErr(w, http.StatusBadRequest, errors.New("name consumers (?consumer=IP) or all=true"))
			return
		}
		if err := throttle.Clear(a.T, addrs...); err != nil {
			writeErr(w, http.StatusInternalServerError, err)
			return
		}
		a.Log.Info("throttle cleared via API", "consumers", len(addrs))
		writeJSON(w, http.StatusOK, map[string]int{"cleared": len(addrs)})
	})
	mux.HandleFunc("GET /v1/counters", func(w http.ResponseWriter, r *http.Request) {
		// What the backend delayed, per consumer: empty for backends that
		// do not count (they hold no packets).
		out := map[netip.Addr]throttle.DelayCounters{}
		if c := throttle.CountingOf(a.T); c != nil {
			out = c.Counters()
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		// The backend's totals that belong to no consumer (the delay
		// line's held packets and release lateness); zero for the rest.
		var out throttle.DelayLineStats
		if s := throttle.CountingOf(a.T); s != nil {
			out = s.Stats()
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		if a.Reload == nil {
			writeErr(w, http.StatusConflict, errors.New("the agent runs without --config: there is no config to reload"))
			return
		}
		rep, err := a.Reload()
		if err != nil {
			writeErr(w, http.StatusUnprocessableEntity, err)
			return
		}
		writeJSON(w, http.StatusOK, rep)
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		if a.Status == nil {
			writeJSON(w, http.StatusOK, map[string]string{"backend": a.T.Name()})
			return
		}
		writeJSON(w, http.StatusOK, a.Status())
	})
	mux.HandleFunc("GET /v1/events", a.serveEvents)
	return mux
}

// DecodeThrottleRequest parses and validates a whole request before
// anything is applied: unknown fields, bad addresses, limits.
func DecodeThrottleRequest(r io.Reader) (map[netip.Addr]throttle.Setting, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var req ThrottleRequest
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("bad request body: %w", err)
	}
	if dec.More() {
		return nil, errors.New("bad request body: trailing data")
	}
	if len(req.Consumers) == 0 {
		return nil, errors.New("no consumers in request")
	}
	if len(req.Consumers) > MaxConsumers {
		return nil, fmt.Errorf("%d consumers in one request, limit %d", len(req.Consumers), MaxConsumers)
	}
	out := make(map[netip.Addr]throttle.Setting, len(req.Consumers))
	for k, v := range req.Consumers {
		a, err := netip.ParseAddr(k)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("consumer %q is not an IP address", k)
		}
		out[a.Unmap()] = v
	}
	if err := throttle.ValidateAll(out); err != nil {
		return nil, err
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	// Encode before writing the header, so a value that cannot be
	// encoded is a 500 with a reason rather than an empty 200.
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]string{"error": "encoding the response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// ListenUnix listens on a unix socket that only the agent's own user
// (root) can connect to. A stale socket file from a
// crashed agent is replaced; a live one (another agent) is an error.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another agent is listening on %s", path)
	}
	os.Remove(path)
	// The socket is created 0600 (umask), not chmod-ed after: between the
	// two another user could connect.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	return peerUIDListener{Listener: l, uid: uint32(os.Geteuid())}, nil
}
