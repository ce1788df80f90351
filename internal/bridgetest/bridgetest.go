// Package bridgetest builds, for root tests, the smallest bridge-mode
// topology: an initiator and a target namespace, each joined by a veth
// pair to a Linux bridge in a third (switch) namespace, with IPv4 and IPv6
// addresses. Closures run inside a namespace on a locked OS thread. It
// removes everything it creates at test cleanup and touches nothing else
// (random names with a fixed prefix).
//
// Imports (sanqos): internal/testenv.
package bridgetest

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"golang.org/x/sys/unix"
)

// Worker runs closures on one OS thread inside a network namespace.
// Sockets opened in a closure keep the namespace for life.
type Worker struct{ ch chan func() }

// Do runs fn in the namespace and waits for it.
func (w *Worker) Do(fn func()) {
	done := make(chan struct{})
	w.ch <- func() { defer close(done); fn() }
	<-done
}

// NewWorker starts a Worker in the named namespace (/run/netns/name); it
// stops at test cleanup.
func NewWorker(tb testing.TB, name string) *Worker {
	tb.Helper()
	w := &Worker{ch: make(chan func())}
	errc := make(chan error)
	go func() {
		// The thread stays locked and is discarded when the worker ends.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + name)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		errc <- err
		if err != nil {
			return
		}
		for fn := range w.ch {
			fn()
		}
	}()
	if err := <-errc; err != nil {
		tb.Fatalf("enter netns %s: %v", name, err)
	}
	tb.Cleanup(func() { close(w.ch) })
	return w
}

// Bridge is the topology.
type Bridge struct {
	// Namespaces: initiator, target, switch.
	INS, TNS, SNS string
	I, T, S       *Worker
	// TargetPort is the switch's bridge port towards the target (where
	// bridge mode captures).
	TargetPort     string
	IAddr, TAddr   netip.Addr
	IAddr6, TAddr6 netip.Addr
}

// Sh runs a command, failing the test on error.
func Sh(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// New builds the topology (root needed: skipped, or failed in CI).
func New(tb testing.TB) *Bridge {
	tb.Helper()
	testenv.RequireRoot(tb)
	testenv.RequireCommands(tb, "ip")
	rb := make([]byte, 3)
	rand.Read(rb)
	id := hex.EncodeToString(rb)
	b := &Bridge{INS: "sqbI" + id, TNS: "sqbT" + id, SNS: "sqbS" + id, TargetPort: "sqb" + id + "t",
		IAddr: netip.MustParseAddr("10.232.0.2"), TAddr: netip.MustParseAddr("10.232.0.1"),
		IAddr6: netip.MustParseAddr("fd00:232::2"), TAddr6: netip.MustParseAddr("fd00:232::1")}
	for _, ns := range []string{b.INS, b.TNS, b.SNS} {
		Sh(tb, "ip", "netns", "add", ns)
		tb.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				tb.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
		Sh(tb, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	Sh(tb, "ip", "-n", b.SNS, "link", "add", "br0", "type", "bridge")
	Sh(tb, "ip", "-n", b.SNS, "link", "set", "br0", "up")
	for _, x := range []struct {
		ns, port string
		a4, a6   netip.Addr
	}{{b.INS, "sqb" + id + "i", b.IAddr, b.IAddr6}, {b.TNS, b.TargetPort, b.TAddr, b.TAddr6}} {
		Sh(tb, "ip", "-n", b.SNS, "link", "add", x.port, "type", "veth", "peer", "name", "eth0", "netns", x.ns)
		Sh(tb, "ip", "-n", b.SNS, "link", "set", x.port, "master", "br0", "up")
		Sh(tb, "ip", "-n", x.ns, "addr", "add", x.a4.String()+"/24", "dev", "eth0")
		Sh(tb, "ip", "-n", x.ns, "addr", "add", x.a6.String()+"/64", "dev", "eth0", "nodad")
		Sh(tb, "ip", "-n", x.ns, "link", "set", "eth0", "up")
	}
	b.I, b.T, b.S = NewWorker(tb, b.INS), NewWorker(tb, b.TNS), NewWorker(tb, b.SNS)
	return b
}
