package agent

import (
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

func TestDecodeThrottleRequest(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"ok", `{"consumers":{"10.0.0.3":{"write_delay_ns":2000000}}}`, true},
		{"ipv6 and mapped v4", `{"consumers":{"fd00::1":{"read_delay_ns":1},"::ffff:10.0.0.1":{"rate_bytes_per_s":1000}}}`, true},
		{"unknown field", `{"consumers":{"10.0.0.3":{"write_delay":2}}}`, false},
		{"bad address", `{"consumers":{"10.0.0.300":{"write_delay_ns":1}}}`, false},
		{"hostname", `{"consumers":{"storage1":{"write_delay_ns":1}}}`, false},
		{"delay at limit", `{"consumers":{"10.0.0.3":{"write_delay_ns":100000000}}}`, false},
		{"negative", `{"consumers":{"10.0.0.3":{"read_delay_ns":-5}}}`, false},
		{"empty", `{"consumers":{}}`, false},
		{"trailing", `{"consumers":{"10.0.0.3":{}}} {}`, false},
		{"not json", `write_delay=5`, false},
	} {
		_, err := DecodeThrottleRequest(strings.NewReader(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// The CLI's client against the API on a real unix socket.
func TestClientServerRoundTrip(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	mem := throttle.NewMemory()
	srv := &http.Server{Handler: (&API{T: mem, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	if _, err := ListenUnix(sock); err == nil {
		t.Fatal("second listener on a live socket was allowed")
	}
	c := NewClient(sock)
	a := netip.MustParseAddr("10.99.0.3")
	if err := c.Set(map[netip.Addr]throttle.Setting{a: {WriteDelay: 2 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(map[netip.Addr]throttle.Setting{a: {WriteDelay: time.Second}}); err == nil || !strings.Contains(err.Error(), "not below") {
		t.Fatalf("absurd delay: %v", err)
	}
	got, err := c.List()
	if err != nil || got[a].WriteDelay != 2*time.Millisecond || len(got) != 1 {
		t.Fatalf("list = %v, %v (rejected request must change nothing)", got, err)
	}
	// A zone names no consumer (packets carry none): refused, as in a set.
	if err := c.Clear(netip.MustParseAddr("fe80::3%eth0")); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Fatalf("clear with a zone: %v", err)
	}
	if err := c.Clear(); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.List(); len(got) != 0 {
		t.Fatalf("after clear: %v", got)
	}
	srv.Close()
	if err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Clear(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("no agent: %v", err)
	}
}

// The delay line's totals reach a client whole: the lab sums release
// lateness across runs from them.
func TestClientStats(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: (&API{T: countingThrottle{throttle.NewMemory()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	got, err := NewClient(sock).Stats()
	if err != nil {
		t.Fatal(err)
	}
	if want := (countingThrottle{}).Stats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}
