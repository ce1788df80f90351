package guest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/lab/experiments"
)

// The guest's kernel parameter is the one the lab reads.
func TestAccelKeyMatchesLab(t *testing.T) {
	if AccelCmdlineKey != lab.GuestCmdlineKey {
		t.Fatalf("guest boots with %s=, the lab reads %s=", AccelCmdlineKey, lab.GuestCmdlineKey)
	}
}

// Issue 23's done-when, through the CLI: `lab up --kernel debian` builds
// the lab in the stock-kernel guest, `lab run autonomic` (shrunk for TCG:
// two writers, one cycle, one threshold, no oracle) runs there and its
// summary comes back to the host naming the accelerator and kernel, and
// `lab down` leaves nothing: no QEMU, no directory. The guest has its own
// directory (SANQOS_GUEST_DIR), so a guest lab someone has up on this
// machine is not touched, nor is the host's lab.
// It is one function because it is one guest lab, up, run and down in
// order through the CLI, each step on what the one before left.
func TestLabUpRunDownInGuest(t *testing.T) {
	requireGuest(t)
	testenv.RequireCommands(t, "go", "tgtd", "tgtadm")
	if err := lab.CheckPrereqs(); err != nil {
		testenv.RequireCommands(t, "fio-with-libiscsi: "+err.Error())
	}
	tmp := t.TempDir()
	bin := buildLab(t, tmp)
	dir := filepath.Join(tmp, "guest")
	results := filepath.Join(tmp, "results")
	sanqos := func(timeout time.Duration, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "SANQOS_GUEST_DIR="+dir)
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(timeout):
				cmd.Process.Kill()
			}
		}()
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("sanqos %s: %v in %v", strings.Join(args, " "), err, time.Since(start).Round(time.Second))
		return string(out), err
	}
	defer func() {
		if l := Leftovers(dir); len(l) > 0 {
			Remove(dir, 10*time.Second)
		}
	}()
	out, err := sanqos(5*time.Minute, "lab", "up", "--kernel", "debian")
	if err != nil {
		t.Fatalf("lab up --kernel debian: %v\n%s", err, out)
	}
	if !strings.Contains(out, "stock-kernel guest: ") || !strings.Contains(out, "LUN 4") {
		t.Errorf("lab up's output:\n%s", out)
	}
	out, err = sanqos(time.Minute, "lab", "status")
	if err != nil || !strings.Contains(out, "stock-kernel guest\t") || !strings.Contains(out, "4 MB/s") {
		t.Errorf("lab status: %v\n%s", err, out)
	}
	out, err = sanqos(8*time.Minute, "lab", "run", "autonomic", "--results", results, "--run-id", "guest-test",
		"--scale", "0.15", "--cycles", "1", "--thresholds", "40ms")
	if err != nil {
		t.Fatalf("lab run autonomic: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(results, "autonomic", "guest-test", "summary.json"))
	if err != nil {
		t.Fatalf("%v; lab run said:\n%s", err, out)
	}
	var sum struct {
		Accelerator, Kernel, Experiment string
		Writers                         int
		Baseline                        experiments.ControlledRun
		Regulated                       []experiments.ControlledRun
		Oracle                          []any
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	_, version, _ := Kernel()
	t.Logf("summary: %s on %s; baseline p95 %.1f ms, 40 ms threshold: p95 %.1f ms", sum.Accelerator, sum.Kernel, sum.Baseline.ReadWaitMs.P95, p95(sum.Regulated))
	// The flags given hold (one threshold, one cycle); the TCG defaults
	// fill in the rest (no oracle), and the thesis' twelve writers run.
	if !strings.Contains(out, "scaled for TCG unless given: --no-oracle=true") {
		t.Errorf("lab run did not say which TCG defaults it added:\n%s", out)
	}
	if sum.Accelerator != "tcg" || sum.Kernel != version || sum.Experiment != "autonomic" || sum.Writers != 12 || len(sum.Regulated) != 1 || len(sum.Oracle) != 0 || sum.Baseline.ReadWaitMs.N == 0 {
		t.Errorf("summary.json:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(results, "autonomic", "latest", "report.html")); err != nil {
		t.Errorf("no report through results/autonomic/latest: %v", err)
	}
	out, err = sanqos(2*time.Minute, "lab", "down", "--kernel", "debian")
	if err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	if l := Leftovers(dir); len(l) > 0 {
		t.Errorf("left after lab down: %v", l)
	}
}

// buildLab builds sanqos-lab and, beside it, the sanqos it starts agents
// from into dir, and returns sanqos-lab's path.
func buildLab(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/sanqos/sanqos/cmd/sanqos", "github.com/sanqos/sanqos/cmd/sanqos-lab").CombinedOutput()
	if err != nil {
		t.Fatalf("build sanqos and sanqos-lab: %v\n%s", err, out)
	}
	return filepath.Join(dir, "sanqos-lab")
}

func p95(rs []experiments.ControlledRun) float64 {
	if len(rs) == 0 {
		return 0
	}
	return rs[0].ReadWaitMs.P95
}

// Without QEMU (or a stock kernel) lab up --kernel fails saying what to
// install, and leaves no directory behind.
func TestUpLabWithoutQEMU(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir := filepath.Join(t.TempDir(), "guest")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Dir: dir}, {Dir: dir, Kernel: "/boot/vmlinuz-none"}} {
		_, err = UpLab(context.Background(), o, self, self, nil, io.Discard)
		if !errors.Is(err, ErrNoGuest) || !strings.Contains(err.Error(), "scripts/setup.sh") {
			t.Errorf("kernel %q: %v, want ErrNoGuest", o.Kernel, err)
		}
		if _, serr := os.Stat(dir); serr == nil {
			t.Errorf("kernel %q: %s left behind", o.Kernel, dir)
		}
	}
}
