package agent

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/throttle"
)

func TestHTTPGuards(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	api := (&API{T: throttle.NewMemory(), Log: discardLog()}).Handler()
	view := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "view") })
	mkServer := func(tok string) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/v1/", tokenOnly(tok, api))
		mux.Handle("GET /metrics", view)
		return sameOrigin(mux)
	}
	body := `{"consumers":{"10.0.0.3":{"write_delay_ns":2000000}}}`
	tests := []struct {
		name   string
		token  string // configured
		method string
		path   string
		header map[string]string
		want   int
	}{
		{"views need no token", "", "GET", "/metrics", nil, 200},
		{"API refused without a configured token", "", "POST", "/v1/throttles", map[string]string{"Authorization": "Bearer " + token}, 403},
		{"API read refused without a configured token", "", "GET", "/v1/throttles", nil, 403},
		{"no bearer", token, "POST", "/v1/throttles", nil, 401},
		{"wrong bearer", token, "POST", "/v1/throttles", map[string]string{"Authorization": "Bearer " + strings.Repeat("x", 32)}, 401},
		{"right bearer", token, "POST", "/v1/throttles", map[string]string{"Authorization": "Bearer " + token}, 200},
		{"right bearer, same origin", token, "POST", "/v1/throttles", map[string]string{"Authorization": "Bearer " + token, "Origin": "http://example.com"}, 200},
		{"right bearer, cross origin", token, "POST", "/v1/throttles", map[string]string{"Authorization": "Bearer " + token, "Origin": "http://evil.example"}, 403},
		{"cross-site referer", token, "DELETE", "/v1/throttles?all=true", map[string]string{"Authorization": "Bearer " + token, "Referer": "http://evil.example/x"}, 403},
		{"views take no writes", token, "POST", "/metrics", nil, 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://example.com"+tc.path, strings.NewReader(body))
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			mkServer(tc.token).ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s %s: status %d, want %d (%s)", tc.method, tc.path, rec.Code, tc.want, rec.Body)
			}
		})
	}
}

// helperDial is run by the test binary re-executed as another user: it
// connects to the socket and reports whether the agent answered.
func init() {
	if path := os.Getenv("SANQOS_TEST_DIAL"); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			os.Stdout.WriteString("refused: " + err.Error())
			os.Exit(0)
		}
		io.WriteString(c, "GET /v1/throttles HTTP/1.0\r\n\r\n")
		b, _ := io.ReadAll(c)
		os.Stdout.WriteString("answered: " + string(b))
		os.Exit(0)
	}
}

// The control socket answers only its owner, even if its mode is
// loosened: a non-root process gets nothing.
func TestUnixSocketRefusesOtherUsers(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	// The re-executed helper runs as nobody: it must reach its binary.
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "s.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: (&API{T: throttle.NewMemory(), Log: discardLog()}).Handler()}
	go srv.Serve(l)
	defer srv.Close()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	// Loosen it, as a careless operator might; the peer check must hold.
	os.Chmod(sock, 0o666)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agent.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(uid uint32) string {
		cmd := exec.Command(bin)
		cmd.Env = []string{"SANQOS_TEST_DIAL=" + sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper as uid %d: %v", uid, err)
		}
		return string(out)
	}
	if out := run(65534); strings.Contains(out, "200 OK") {
		t.Errorf("uid 65534 was answered: %q", out)
	}
	if out := run(0); !strings.Contains(out, "200 OK") {
		t.Errorf("root was not answered: %q", out)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
