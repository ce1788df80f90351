// Package etcdtest runs a real, single-member etcd server for tests:
// Debian's /usr/bin/etcd (package etcd-server), bound to 127.0.0.1 on
// free ports with a temporary data directory. Tests of package cluster
// talk to it exactly as agents talk to a production cluster; there is no
// in-process fake, because what we must show (leases expiring, elections
// moving, watches resuming after the server dies) is etcd's behaviour,
// not ours.
//
// Outside CI a missing etcd skips the test; in CI (CI=true) it fails it
// (internal/testenv), so cluster tests can never pass by not running.
//
// Imports (sanqos): internal/testenv.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sanqos/sanqos/internal/testenv"
)

// Binary is Debian's etcd server.
const Binary = "/usr/bin/etcd"

// Server is one running etcd member. Stop and Start may be called any
// number of times; the data directory and ports survive a restart, so a
// restarted server has the same keys (and its leases, whose TTLs etcd
// renews on start).
type Server struct {
	t       testing.TB
	dir     string
	client  string // http://127.0.0.1:port
	peer    string
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// Start starts a fresh etcd and registers its cleanup (kill, remove data).
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		testenv.RequireCommands(t, "etcd") // skips, or fails in CI, with the reason
		t.Fatalf("%s missing but etcd on PATH: install Debian's etcd-server", Binary)
	}
	s := &Server{t: t, dir: dataDir(t)}
	s.logPath = filepath.Join(s.dir, "etcd.log")
	ports := freePorts(t, 2)
	s.client = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	s.peer = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	t.Cleanup(s.Stop)
	s.Restart()
	return s
}

// Endpoint is the client URL.
func (s *Server) Endpoint() string { return s.client }

// Restart starts the server (again) and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		s.t.Fatal("etcdtest: Restart of a running server")
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.mu.Unlock()
		s.t.Fatal(err)
	}
	cmd := exec.Command(Binary,
		"--name", "test",
		"--data-dir", filepath.Join(s.dir, "data"),
		"--listen-client-urls", s.client, "--advertise-client-urls", s.client,
		"--listen-peer-urls", s.peer, "--initial-advertise-peer-urls", s.peer,
		"--initial-cluster", "test="+s.peer,
		"--logger", "zap", "--log-outputs", "stderr")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.mu.Unlock()
		s.t.Fatalf("starting etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	s.waitHealthy(exited)
}

// waitHealthy polls the server with a client until a read succeeds: a
// linearizable Get needs a leader, so it answers only once the member
// has elected itself. No sleeps: each poll is bounded by its own timeout.
func (s *Server) waitHealthy(exited chan struct{}) {
	s.t.Helper()
	cli := s.Client()
	defer cli.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logPath)
			s.t.Fatalf("etcd exited during start: %s", tail(string(b), 2000))
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("etcd not healthy after 20s: %v", err)
		}
	}
}

// Stop kills the server (SIGKILL: a crash, not a goodbye) and waits for it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Client returns a new client of the server; the caller closes it.
func (s *Server) Client() *clientv3.Client {
	s.t.Helper()
	cli, err := clientv3.New(ClientConfig(s.client))
	if err != nil {
		s.t.Fatalf("etcd client: %v", err)
	}
	return cli
}

// ClientConfig is the client configuration tests use: short dial timeout,
// keepalive so a dead server is noticed, and a quiet logger.
func ClientConfig(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints: endpoints, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		Logger: zap.NewNop(),
	}
}

// dataDir is a temporary directory, on tmpfs where there is one: etcd
// fsyncs every write, and on a shared 2-core VM disk flushes are what would
// make the timings the tests log noisy.
func dataDir(t testing.TB) string {
	d, err := os.MkdirTemp("/dev/shm", "etcdtest-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
