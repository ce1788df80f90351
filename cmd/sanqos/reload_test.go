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
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/throttle"
)

// reloadableAgent serves a configured (dry-run, static) agent's control
// API on a temp socket (@SOCK@ in yaml), wired for reloads as the agent
// command wires it: the file at the returned path is what a reload
// re-reads.
func reloadableAgent(t *testing.T, yaml string) (sock, path string, a *agent.Agent) {
	t.Helper()
	dir := t.TempDir()
	path, sock = filepath.Join(dir, "sanqos.yaml"), filepath.Join(dir, "agent.sock")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(yaml, "@SOCK@", sock)), 0o600); err != nil {
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
		{"a resource added", head + "resources:\n  - {name: vg1, devices: [loop0]}\n  - {name: vg2, devices: [loop1]}\n", cli.ExitOK, "config reloaded: 2 resources", "1"},
		{"no resources", head + "resources: []\n", cli.ExitConfig, "reload refused: the new config lists no resources: it would leave nothing protected (the running config stays)", "0"},
		{"no file content at all", "", cli.ExitConfig, "lists no resources", "0"},
		{"a file that does not parse", head + "resources: [\n", cli.ExitConfig, "does not load (the running config stays)", "0"},
		{"a setting that needs a restart", strings.Replace(head, "dry-run", "delayline", 1) + "resources:\n  - {name: vg1, devices: [loop0]}\n", cli.ExitConfig, "needs a restart: backend changed", "0"},
		{"fixed", head + "resources:\n  - {name: vg1, devices: [loop0]}\n", cli.ExitOK, "config reloaded: 1 resources", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "reload", "--socket", sock)
			if code := cli.ExitCode(err); code != tc.code || !strings.Contains(out+errText(err), tc.says) {
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
	if cli.ExitCode(err) != cli.ExitRuntime || !strings.Contains(errText(err), "not running") {
		t.Errorf("no agent: exit %d, %q %v", cli.ExitCode(err), out, err)
	}
	sock := serveAPI(t, agent.Status{Backend: "dry-run"})
	out, err = run(t, "reload", "--socket", sock)
	if cli.ExitCode(err) != cli.ExitRuntime || !strings.Contains(errText(err), "without --config") {
		t.Errorf("agent without --config: exit %d, %q %v", cli.ExitCode(err), out, err)
	}
}

// reload, status and throttle find the agent on the socket its config
// sets (--config; by default the unit's file, or the default socket when
// there is none), unless --socket names one.
func TestClientsFindTheConfigsSocket(t *testing.T) {
	const file = "socket: @SOCK@\nbackend: dry-run\nhttp: \"\"\ndiscovery: {source: static}\nresources:\n  - {name: vg1, devices: [loop0]}\n"
	_, path, _ := reloadableAgent(t, file)
	none := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"reload", "--config", path}, cli.ExitOK, "config reloaded: 1 resources"},
		{[]string{"status", "--config", path}, cli.ExitOK, "backend dry-run"},
		{[]string{"throttle", "list", "--config", path}, cli.ExitOK, ""},
		{[]string{"reload", "--config", path, "--socket", none + ".sock"}, cli.ExitRuntime, "not running"},
		{[]string{"reload", "--config", none + ".yaml"}, cli.ExitRuntime, "no such file"},
	} {
		out, err := run(t, tc.args...)
		if code := cli.ExitCode(err); code != tc.code || !strings.Contains(out+errText(err), tc.says) {
			t.Errorf("%v: exit %d, %q %v; want %d saying %q", tc.args, code, out, err, tc.code, tc.says)
		}
	}
	dir := t.TempDir()
	for _, tc := range []struct{ name, file, socket, err string }{
		{"set", "socket: /run/x/a.sock\n", "/run/x/a.sock", ""},
		{"not set", "backend: edt\n", agent.DefaultSocket, ""},
		{"errors elsewhere are the agent's to judge", "socket: /run/x/a.sock\nresources: 7\n", "/run/x/a.sock", ""},
		{"does not parse", "socket: [\n", agent.DefaultSocket, ""},
		{"relative", "socket: a.sock\n", "", `socket: "a.sock": want an absolute path`},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := configSocket(p); s != tc.socket || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %q, %v; want %q, %q", tc.name, s, err, tc.socket, tc.err)
		}
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
