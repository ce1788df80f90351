package experiments

import (
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
)

// The helpers of the integration tests that bring the lab up, as lab's
// own tests have them (lab_integration_test.go, throttle_integration_test.go).

func TestMain(m *testing.M) {
	// lab up starts its supervisor by running this test binary again.
	lab.ServeIfAsked()
	rc := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(rc)
}

func requireLab(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if err := lab.CheckPrereqs(); err != nil {
		testenv.RequireCommands(t, "fio-with-libiscsi: "+err.Error())
	}
}

// built is the sanqos binary the lab runs inside bm, built once for the
// package's tests (TestMain removes its directory).
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildSanqos builds the sanqos binary the lab runs inside bm, once, and
// points lab.SanqosBinary at it for the test.
func buildSanqos(t *testing.T) {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "sanqos-exp-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "sanqos")
		if out, err := exec.Command("go", "build", "-o", built.bin, "../../cmd/sanqos").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("building sanqos: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	lab.SanqosBinary = built.bin
	t.Cleanup(func() { lab.SanqosBinary = "" })
}

// upLab brings a small lab up for one test and takes it down after,
// asserting nothing is left.
func upLab(t *testing.T) *lab.State {
	t.Helper()
	o := lab.DefaultOptions()
	o.LUNSize = 256 << 20
	return upLabWith(t, o)
}

// upLabWith is upLab with the given options.
func upLabWith(t *testing.T, o lab.Options) *lab.State {
	t.Helper()
	requireLab(t)
	if left := lab.Leftovers(); len(left) > 0 {
		t.Fatalf("lab objects exist before the test (run `sanqos-lab lab down`): %v", left)
	}
	s, err := lab.Up(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(io.Discard); err != nil {
			t.Errorf("down: %v", err)
		}
		if left := lab.Leftovers(); len(left) > 0 {
			t.Errorf("left behind after down: %v", left)
		}
	})
	return s
}

func meanOver(res *lab.PhaseResult, host string, from, to time.Duration, f func(iv sample.Interval) float64) float64 {
	m, _ := report.MeanStderr(report.Values(res.Between(from, to), host, f))
	return m
}

// readerWaitOver is the reader's (b2's) mean read wait over the window,
// each tick weighted by its completed reads (iostat's r_await over the
// window), and how many reads it saw. A tick with no completed read has
// a NaN wait; an unweighted mean would be NaN, and NaN compares false
// with any bound, so a reader stalled for a whole tick would pass.
func readerWaitOver(res *lab.PhaseResult, from, to time.Duration) (ms float64, reads uint64) {
	var sum float64
	for _, t := range res.Between(from, to) {
		iv, ok := t.Dev["b2"]
		if !ok || iv.Reads == 0 {
			continue
		}
		sum += iv.ReadWaitMs * float64(iv.Reads)
		reads += iv.Reads
	}
	if reads == 0 {
		return math.NaN(), 0
	}
	return sum / float64(reads), reads
}
