package guest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
)

func requireGuest(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "qemu-system-x86_64", "busybox", "cpio")
	if _, _, err := Kernel(); err != nil {
		testenv.Missing(t, err.Error())
	}
}

// The guest boots Debian's stock kernel, not this machine's, loads the
// modules this kernel lacks, and hands back the script's exit code and
// output.
func TestGuestRunsStockKernel(t *testing.T) {
	requireGuest(t)
	_, version, _ := Kernel()
	host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	res, err := Run(context.Background(), Options{Console: testWriter{t}}, `set -e
modprobe sch_netem
modprobe sch_fq
ip link set lo up
tc qdisc add dev lo root netem delay 1ms
tc qdisc show dev lo
exit 3
`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s guest, %v: %s", res.Accel, res.Elapsed, res.Output)
	if res.Kernel != version || res.Kernel == strings.TrimSpace(string(host)) {
		t.Errorf("guest ran kernel %q, want the stock %q (host %s)", res.Kernel, version, host)
	}
	if res.ExitCode != 3 {
		t.Errorf("exit code %d, want the script's 3", res.ExitCode)
	}
	if !strings.Contains(res.Output, "netem") {
		t.Errorf("no netem qdisc in the guest:\n%s", res.Output)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	if testing.Verbose() {
		w.t.Logf("console: %s", strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

// The throttle backends this machine's kernel cannot run, run for real on
// the stock kernel: the throttle package's tests, compiled here and run in
// the guest, pass, and their end-to-end halves ran (not the refusal
// branches): EDT (fq + tc BPF) and the thesis' netem tree delay one
// consumer and not its neighbour, EDT an IPv6 one beside an IPv4 one (and
// with its IPv4 program alone delays the IPv4 one and names the IPv6 one),
// the write caps cap, HTB classifies by fw marks.
func TestStockKernelThrottleBackends(t *testing.T) {
	requireGuest(t)
	testenv.RequireCommands(t, "go")
	dir := t.TempDir()
	build := exec.Command("go", "test", "-c", "-o", filepath.Join(dir, "throttle.test"), "github.com/sanqos/sanqos/throttle")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the throttle tests: %v\n%s", err, out)
	}
	// TestNetemMarksByWriteOn is left to the host: under TCG it missed a
	// rule's packet count once in three CI runs; netem's end to end is
	// TestNetemDelaysOrRefusesCleanly. The tests read their testdata
	// relative to the package; the work
	// directory carries a copy, since the guest sees only the host's
	// root read-only with tmpfs over /tmp, where a checkout may live.
	if err := os.CopyFS(filepath.Join(dir, "testdata"), os.DirFS("../../throttle/testdata")); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Options{Dir: dir}, fmt.Sprintf(
		"CI=true %s/throttle.test -test.run 'DelaysOrRefuses|WriteCap|HTB' -test.v -test.count=1", dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(res.Output, "\n") {
		if strings.Contains(l, "round trip") || strings.Contains(l, "cap ") || strings.HasPrefix(l, "--- ") {
			t.Logf("guest %s: %s", res.Kernel, strings.TrimSpace(l))
		}
	}
	if res.ExitCode != 0 {
		t.Fatalf("the throttle tests failed on %s (exit %d):\n%s", res.Kernel, res.ExitCode, res.Output)
	}
	for _, want := range []string{"edt: round trip p50: delayed", "IPv6 delayed", "IPv6 refused", "netem: round trip p50: delayed", "--- PASS: TestWriteCapInNamespaces", "filter: fw"} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("the guest run lacks %q: the stock kernel's path did not run", want)
		}
	}
	t.Logf("%s guest on %s in %v", res.Accel, res.Kernel, res.Elapsed.Round(time.Second))
}

// A persistent guest stays up between commands, runs each with its
// output and exit code, interrupts one whose context ends, and leaves
// nothing behind once stopped.
func TestPersistentGuest(t *testing.T) {
	requireGuest(t)
	dir := filepath.Join(t.TempDir(), "g")
	g, err := Start(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop(30 * time.Second)
	t.Logf("guest %s (%s) up, pid %d", g.Info.Release, g.Info.Accel, g.Info.PID)
	if again, err := Open(dir); err != nil || again.Info.PID != g.Info.PID {
		t.Fatalf("Open: %v, %+v", err, again)
	}
	var out strings.Builder
	rc, err := g.Exec(context.Background(), "uname -r; grep -o 'sanqos.accel=[a-z]*' /proc/cmdline; exit 4\n", &out)
	if err != nil || rc != 4 {
		t.Fatalf("exec: rc %d, %v", rc, err)
	}
	if want := g.Info.Release + "\nsanqos.accel=tcg\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	rc, err = g.Exec(ctx, "trap 'echo interrupted; exit 9' TERM\nsleep 600 & wait\n", io.Discard)
	if err == nil || rc != 9 || time.Since(start) > time.Minute {
		t.Errorf("cancelled exec: rc %d, %v after %v; want 9 and the context's error", rc, err, time.Since(start))
	}
	if r := g.Running(); len(r) != 0 {
		t.Errorf("still running: %q", r)
	}
	if err := g.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if l := Leftovers(dir); len(l) != 0 {
		t.Errorf("left after Stop: %v", l)
	}
}
