package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// Client talks to a running agent over its unix socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// NewClient returns a client for the agent at socket.
func NewClient(socket string) *Client {
	return &Client{Socket: socket, hc: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}}
}

// RefusedError is the agent's answer to a request it refused: the HTTP
// status and its reason.
type RefusedError struct {
	Code   int
	Reason string
}

func (e *RefusedError) Error() string { return "agent refused: " + e.Reason }

// ErrNotRunning says no agent answers on the socket.
var ErrNotRunning = errors.New("the sanqos agent is not running")

func (c *Client) do(method, path string, body any, out any) error {
	return c.doWith(c.hc, method, path, body, out)
}

func (c *Client) doWith(hc *http.Client, method, path string, body any, out any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequest(method, "http://agent"+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w (no agent on %s): %s", ErrNotRunning, c.Socket, StartHint)
		}
		if errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("%s: permission denied (the control socket is root-only)", c.Socket)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		return &RefusedError{Code: resp.StatusCode, Reason: e.Error}
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// Set applies settings (all or nothing).
func (c *Client) Set(settings map[netip.Addr]throttle.Setting) error {
	req := ThrottleRequest{Consumers: map[string]throttle.Setting{}}
	for a, s := range settings {
		req.Consumers[a.String()] = s
	}
	return c.do(http.MethodPost, "/v1/throttles", req, nil)
}

// Clear removes the named consumers' throttles, or all with none named.
func (c *Client) Clear(consumers ...netip.Addr) error {
	q := url.Values{}
	for _, a := range consumers {
		q.Add("consumer", a.String())
	}
	if len(consumers) == 0 {
		q.Set("all", "true")
	}
	return c.do(http.MethodDelete, "/v1/throttles?"+q.Encode(), nil, nil)
}

// List returns the agent's current throttles (a JSON object keyed by
// address, which netip.Addr decodes).
func (c *Client) List() (map[netip.Addr]throttle.Setting, error) {
	var m map[netip.Addr]throttle.Setting
	return m, c.do(http.MethodGet, "/v1/throttles", nil, &m)
}

// StartHint tells an operator who found no agent how to start one: the
// installed service first. status and the throttle commands say the same.
const StartHint = "start it with: systemctl start sanqos (or: sanqos agent --config /etc/sanqos/sanqos.yaml)"

// throttlesByAddr keys the throttles the agent sent (JSON object keys are
// strings) by address.
func throttlesByAddr(m map[string]throttle.Setting) (map[netip.Addr]throttle.Setting, error) {
	out := make(map[netip.Addr]throttle.Setting, len(m))
	for k, v := range m {
		a, err := netip.ParseAddr(k)
		if err != nil {
			return nil, fmt.Errorf("agent sent bad address %q", k)
		}
		out[a] = v
	}
	return out, nil
}

// ThrottlesByAddr is the status document's throttles keyed by address, as
// List returns them: a caller that needs both the throttles and the
// resources' state reads them from one status, one snapshot.
func (s Status) ThrottlesByAddr() (map[netip.Addr]throttle.Setting, error) {
	return throttlesByAddr(s.Throttles)
}

// Counters returns what the backend delayed per consumer (GET /v1/counters).
func (c *Client) Counters() (map[string]throttle.DelayCounters, error) {
	out := map[string]throttle.DelayCounters{}
	return out, c.do(http.MethodGet, "/v1/counters", nil, &out)
}

// Stats returns the backend's totals that belong to no consumer (GET
// /v1/stats).
func (c *Client) Stats() (throttle.DelayLineStats, error) {
	var out throttle.DelayLineStats
	return out, c.do(http.MethodGet, "/v1/stats", nil, &out)
}

// Reload asks the agent to re-read its config file and waits for its
// verdict: nil when it applied the file (reply says how it maps), else
// the agent's reason for refusing it ("agent refused: ..."). A reload
// runs a discovery round, which may take a target's timeouts: it waits
// up to a minute.
func (c *Client) Reload() (ReloadReply, error) {
	hc := *c.hc
	hc.Timeout = time.Minute
	var out ReloadReply
	return out, c.doWith(&hc, http.MethodPost, "/v1/reload", nil, &out)
}

// Status returns the agent's status document.
func (c *Client) Status(out any) error { return c.do(http.MethodGet, "/v1/status", nil, out) }
