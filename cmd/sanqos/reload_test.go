package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/throttle"
)

// reloadableAgent serves a configured (dry-run, static) agent's control
// API on a temp socket, wired for reloads as the agent command wires it:
// the file at the returned path is what a reload re-reads.
func reloadableAgent(t *testing.T, yaml string) (sock, path string, a *agent.Agent) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "sanqos.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mem := throttle.NewMemory()
	disc, err := newDiscoverer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a = agent.New(cfg, agent.Deps{Throttle: mem, Log: log, NewController: newPID, NewSmoother: newEWMA, Discoverer: disc, NewDiscoverer: newDiscoverer})
	rl := &reloader{path: path, load: config.Load, apply: agentReload(a, cfg, false, nil), a: a, log: log}
	api := &agent.API{T: mem, Log: log, Status: func() any { return a.Status() },
		Reload: func() (agent.ReloadReply, error) { return rl.reload("api") }}
	sock = filepath.Join(dir, "agent.sock")
	l, err := agent.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock, path, a
}

// scrape is the agent's /metrics page.
func scrape(t *testing.T, a *agent.Agent) string {
	t.Helper()
	rec := httptest.NewRecorder()
	a.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// sanqos reload returns the agent's verdict: 0 when it applied the file,
// 3 with the agent's reason when it refused it (the running config
// stays), and the reload metrics follow.
func TestReloadCommandReturnsTheVerdict(t *testing.T) {
	const head = "backend: dry-run\nhttp: \"\"\ndiscovery: {source: static}\n"
	sock, path, a := reloadableAgent(t, head+"resources:\n  - {name: vg1, devices: [loop0]}\n")
	for _, tc := range []struct {
		name, file string
		code       int
		says       string
		successful string // sanqos_config_last_reload_successful after it
	}{
		{"a resource added", head + "resources:\n  - {name: vg1, devices: [loop0]}\n  - {name: vg2, devices: [loop1]}\n", exitOK, "config reloaded: 2 resources", "1"},
		{"no resources", head + "resources: []\n", exitConfig, "reload refused: the new config lists no resources: it would leave nothing protected (the running config stays)", "0"},
		{"no file content at all", "", exitConfig, "lists no resources", "0"},
		{"a file that does not parse", head + "resources: [\n", exitConfig, "does not load (the running config stays)", "0"},
		{"a setting that needs a restart", strings.Replace(head, "dry-run", "delayline", 1) + "resources:\n  - {name: vg1, devices: [loop0]}\n", exitConfig, "needs a restart: backend changed", "0"},
		{"fixed", head + "resources:\n  - {name: vg1, devices: [loop0]}\n", exitOK, "config reloaded: 1 resources", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "reload", "--socket", sock)
			if code := exitCode(err); code != tc.code || !strings.Contains(out+errText(err), tc.says) {
				t.Errorf("exit %d, %q %v; want %d saying %q", code, out, err, tc.code, tc.says)
			}
			if m := scrape(t, a); !strings.Contains(m, "\nsanqos_config_last_reload_successful "+tc.successful+"\n") {
				t.Errorf("metrics after it:\n%s", grepLines(m, "reload"))
			}
		})
	}
}

// Without an agent, or with one started without --config, there is
// nothing that could apply the file: exit 1, saying so.
func TestReloadCommandWithoutAConfiguredAgent(t *testing.T) {
	out, err := run(t, "reload", "--socket", filepath.Join(t.TempDir(), "none.sock"))
	if exitCode(err) != exitRuntime || !strings.Contains(errText(err), "not running") {
		t.Errorf("no agent: exit %d, %q %v", exitCode(err), out, err)
	}
	sock := serveAPI(t, agent.Status{Backend: "dry-run"})
	out, err = run(t, "reload", "--socket", sock)
	if exitCode(err) != exitRuntime || !strings.Contains(errText(err), "without --config") {
		t.Errorf("agent without --config: exit %d, %q %v", exitCode(err), out, err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
