package sim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestFindLabRuns: the newest usable run of each experiment, skipping a
// newer one that is not (a reader faster than 1 ms: a RAM disk); pid is
// optional.
func TestFindLabRuns(t *testing.T) {
	dir := t.TempDir()
	write := func(exp, run, summary string) {
		d := filepath.Join(dir, exp, run)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "summary.json"), []byte(summary), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(p50 string) string {
		r := `{"read_wait_ms":{"p50":` + p50 + `}}`
		return `{"runs":[` + r + `,` + r + `,` + r + `,` + r + `]}`
	}
	write("interference", "20260101-000000", run("2"))
	write("interference", "20260102-000000", run("0.5"))
	if _, err := FindLabRuns(dir); !errors.Is(err, errNoLab) {
		t.Fatalf("no delay-sweep: err %v", err)
	}
	write("delay-sweep", "20260101-000000", `{"points":[{},{},{},{}]}`)
	lr, err := FindLabRuns(dir)
	if err != nil || filepath.Base(lr.InterferenceDir) != "20260101-000000" || lr.Interference.Runs[0].ReadWaitMs.P50 != 2 ||
		len(lr.Sweep.Points) != 4 || lr.PID != nil || lr.PIDDir != "" {
		t.Fatalf("FindLabRuns = %+v, %v", lr, err)
	}
	write("pid", "20260101-000000", `{"regulated":[{}]}`)
	if lr, err = FindLabRuns(dir); err != nil || lr.PID == nil || len(lr.PID.Regulated) != 1 {
		t.Fatalf("with a pid run: %+v, %v", lr, err)
	}
}
