package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
)

// asSanqosEnv makes the test binary run main() instead of the tests: an
// agent must run in a scratch network namespace, and a namespace is a
// whole process's (every thread's), so it cannot be the test's own.
const asSanqosEnv = "SANQOS_TEST_AS_SANQOS"

func TestMain(m *testing.M) {
	if os.Getenv(asSanqosEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The scratch namespace's veth pair: the agent's interface and the
// consumer's address on the peer.
const (
	dryDev      = "sqd0"
	dryPeer     = "sqd1"
	dryConsumer = "10.214.0.2"
)

// dryRunNS creates a network namespace with a veth pair, deleted at
// cleanup, so nothing the control run builds touches the host (or a lab
// experiment running beside the test).
func dryRunNS(t *testing.T) string {
	t.Helper()
	return testenv.ScratchNS(t, "sqdry", testenv.Veth{Dev: dryDev, Addr: "10.214.0.1", Peer: dryPeer, PeerAddr: dryConsumer})
}

// nsState is the kernel state of ns a backend builds: links, qdiscs and
// tc filters, iptables and ip6tables rules, ipsets, bound NFQUEUEs.
// Packet counters and iptables-save's timestamps are cut.
func nsState(t *testing.T, ns string) map[string]string {
	t.Helper()
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	comments := regexp.MustCompile(`(?m)^#.*$`)
	out := map[string]string{}
	for _, c := range [][]string{
		{"ip", "-d", "link", "show"}, {"tc", "qdisc", "show"},
		{"tc", "filter", "show", "dev", dryDev, "ingress"}, {"tc", "filter", "show", "dev", dryDev, "egress"},
		{"iptables-save"}, {"ip6tables-save"}, {"ipset", "list", "-n"},
		{"cat", "/proc/net/netfilter/nfnetlink_queue"},
	} {
		b, err := exec.Command("ip", append([]string{"netns", "exec", ns}, c...)...).CombinedOutput()
		s := comments.ReplaceAllString(counters.ReplaceAllString(string(b), "[]"), "")
		out[strings.Join(c, " ")] = fmt.Sprintf("%s(err %v)", s, err)
	}
	return out
}

// stateDiff lists the entries of before that after does not match.
func stateDiff(before, after map[string]string) []string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if before[k] != after[k] {
			d = append(d, fmt.Sprintf("%s:\nbefore:\n%s\nafter:\n%s", k, before[k], after[k]))
		}
	}
	return d
}

// nsAgent is the test binary as `sanqos agent` in a namespace, its JSON
// log read as it comes.
type nsAgent struct {
	cmd  *exec.Cmd
	recs chan map[string]any // closed when the log ends
	seen []string
}

func startNSAgent(t *testing.T, ns string, args ...string) *nsAgent {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, os.Args[0], "agent", "--log-json"}, args...)...)
	cmd.Env = append(os.Environ(), asSanqosEnv+"=1")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &nsAgent{cmd: cmd, recs: make(chan map[string]any, 64)}
	go func() {
		defer close(a.recs)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			rec := map[string]any{"raw": sc.Text()}
			json.Unmarshal(sc.Bytes(), &rec)
			a.recs <- rec
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return a
}

// waitLog returns the first record with msg; the log ending or timeout
// passing first fails t with what the agent logged.
func (a *nsAgent) waitLog(t *testing.T, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case rec, ok := <-a.recs:
			if !ok {
				t.Fatalf("agent's log ended before %q:\n%s", msg, strings.Join(a.seen, "\n"))
			}
			a.seen = append(a.seen, fmt.Sprint(rec["raw"]))
			if rec["level"] == "ERROR" {
				t.Errorf("agent logged an error: %s", rec["raw"])
			}
			if rec["msg"] == msg {
				return rec
			}
		case <-deadline:
			t.Fatalf("no %q from the agent in %v:\n%s", msg, timeout, strings.Join(a.seen, "\n"))
		}
	}
}

// stop sends SIGTERM and wants a clean exit.
func (a *nsAgent) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.waitLog(t, "agent stopping: removing throttles", 30*time.Second)
	for range a.recs { // the rest of the log, so Wait has its pipe drained
	}
	if err := a.cmd.Wait(); err != nil {
		t.Errorf("agent after SIGTERM: %v\n%s", err, strings.Join(a.seen, "\n"))
	}
}

// An agent with --dry-run, started on an operator's config that names a
// real backend (auto), runs its control loop, takes a throttle and
// reloads (also after the file's backend changed), and leaves the
// namespace's kernel state as it found it (a fresh namespace) from start
// to exit. Then the same config without --dry-run changes the snapshot,
// so the snapshot can see what --dry-run must not create.
func TestDryRunAgentChangesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "tc", "iptables-save", "ip6tables-save", "ipset")
	ns := dryRunNS(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	cfgPath := filepath.Join(dir, "sanqos.yaml")
	writeCfg := func(backend string) {
		t.Helper()
		c := fmt.Sprintf("backend: %s\ndevice: %s\nsocket: %s\nhttp: \"\"\ndiscovery:\n  source: static\nresources:\n  - name: r1\n    devices: [%s]\n    throttleable: [%s]\n",
			backend, dryDev, sock, testenv.BlockDevice(t), dryConsumer)
		if err := os.WriteFile(cfgPath, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	throttle := func() {
		t.Helper()
		if out, err := run(t, "throttle", "set", dryConsumer, "--read-delay", "2ms", "--write-delay", "2ms", "--socket", sock); err != nil {
			t.Fatalf("throttle set: %v\n%s", err, out)
		}
	}
	writeCfg("auto")
	before := nsState(t, ns)

	a := startNSAgent(t, ns, "--config", cfgPath, "--dry-run")
	a.waitLog(t, "dry run: the agent decides and applies nothing (--dry-run)", 30*time.Second)
	if got := a.waitLog(t, "agent running", 30*time.Second)["backend"]; got != dryRunBackend {
		t.Errorf("agent runs backend %v, want %s", got, dryRunBackend)
	}
	throttle()
	if out, _ := run(t, "throttle", "list", "--socket", sock); !strings.Contains(out, dryConsumer) {
		t.Errorf("the dry-run agent did not record the throttle:\n%s", out)
	}
	// The loop publishes r1 at its first tick; the status is asked
	// until then.
	var status string
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(status, `"name": "r1"`); <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("the dry-run agent runs no loop for r1:\n%s", status)
		}
		status, _ = run(t, "status", "--json", "--socket", sock)
	}
	if d := stateDiff(before, nsState(t, ns)); len(d) > 0 {
		t.Errorf("with --dry-run and a throttle set, the namespace changed:\n%s", strings.Join(d, "\n"))
	}
	writeCfg("delayline") // a backend change needs a restart, but none runs
	if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	a.waitLog(t, "config reloaded", 10*time.Second)
	a.stop(t)
	if d := stateDiff(before, nsState(t, ns)); len(d) > 0 {
		t.Errorf("after the dry-run agent, the namespace changed:\n%s", strings.Join(d, "\n"))
	}

	// The control, last: it leaves iptables' tables instantiated (empty)
	// in the namespace, which the dry-run agent must not find there.
	writeCfg("auto")
	c := startNSAgent(t, ns, "--config", cfgPath)
	c.waitLog(t, "agent running", 30*time.Second)
	throttle()
	if len(stateDiff(before, nsState(t, ns))) == 0 {
		t.Errorf("an agent with backend auto and a throttle left the snapshot unchanged: it cannot see a backend")
	}
	c.stop(t)
}
