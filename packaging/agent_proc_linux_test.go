package packaging

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// agentProc runs the agent under test and follows its JSON log: start,
// wait for a message, signal, stop and check what it logged. It is its
// own file because it is the harness, not the test: TestAgentUnderUnit in
// agent_linux_test.go says what the unit must give the agent, this file
// only how to watch the process.

// agentProc is an agent started in the sandbox, its JSON log parsed.
type agentProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	logs  []map[string]any
	raw   strings.Builder
	more  chan struct{} // a line arrived, or the log ended
	exit  chan error
	ended atomic.Bool
}

func startAgent(t testing.TB, cmd *exec.Cmd) *agentProc {
	t.Helper()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProc{cmd: cmd, more: make(chan struct{}, 1), exit: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			var rec map[string]any
			a.mu.Lock()
			a.raw.WriteString(sc.Text() + "\n")
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				a.logs = append(a.logs, rec)
			}
			a.mu.Unlock()
			a.poke()
		}
		err := cmd.Wait()
		a.ended.Store(true)
		a.exit <- err
		close(a.exit)
		a.poke()
	}()
	t.Cleanup(func() {
		if !a.ended.Load() {
			cmd.Process.Kill()
			<-a.exit
		}
	})
	return a
}

func (a *agentProc) poke() {
	select {
	case a.more <- struct{}{}:
	default:
	}
}

func (a *agentProc) log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.raw.String()
}

// find returns the first log record with msg, if any.
func (a *agentProc) find(msg string) map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.logs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

// waitLog waits for a record with msg; the agent ending first fails.
func (a *agentProc) waitLog(t testing.TB, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if r := a.find(msg); r != nil {
			return r
		}
		if a.ended.Load() && a.find(msg) == nil {
			t.Fatalf("agent ended (%v) before logging %q:\n%s", a.cmd.ProcessState, msg, a.log())
		}
		select {
		case <-a.more:
		case <-deadline:
			t.Fatalf("no %q from the agent in %v:\n%s", msg, timeout, a.log())
		}
	}
}

// stop sends sig and waits up to timeout for the agent to end.
func (a *agentProc) stop(t testing.TB, sig syscall.Signal, timeout time.Duration) error {
	t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case err := <-a.exit:
		return err
	case <-time.After(timeout):
		t.Fatalf("agent still running %v after %v (the unit's TimeoutStopSec):\n%s", sig, timeout, a.log())
		return nil
	}
}

// alive fails t if the agent has ended.
func (a *agentProc) alive(t testing.TB, after string) {
	t.Helper()
	if a.ended.Load() || a.cmd.Process.Signal(syscall.Signal(0)) != nil {
		t.Fatalf("agent died after %s:\n%s", after, a.log())
	}
}

// errors lists the agent's ERROR records.
func (a *agentProc) errors() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.logs {
		if r["level"] == "ERROR" {
			b, _ := json.Marshal(r)
			out = append(out, string(b))
		}
	}
	return out
}
