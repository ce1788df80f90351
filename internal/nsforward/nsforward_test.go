package nsforward

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
)

// Forwards through our own namespace (/proc/self/ns/net): this exercises
// the setns path without creating namespaces, which the lab owns.
func TestServeForwardsHTTP(t *testing.T) {
	testenv.RequireRoot(t) // setns needs CAP_SYS_ADMIN, even into our own namespace
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	defer backend.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, l, "/proc/self/ns/net", backend.Listener.Addr().String(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	for _, path := range []string{"/a", "/b"} { // two connections, two dials
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + l.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello "+path {
			t.Fatalf("got %q", b)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestDialErrors(t *testing.T) {
	for _, tc := range []struct{ ns, addr string }{
		{"/nonexistent/ns", "127.0.0.1:1"},
		{os.DevNull, "127.0.0.1:1"}, // not a namespace
	} {
		if c, err := Dial(context.Background(), tc.ns, tc.addr); err == nil {
			c.Close()
			t.Errorf("%s: dial succeeded", tc.ns)
		}
	}
}
