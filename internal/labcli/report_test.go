package labcli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/report"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	c := Root()
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(args)
	err := c.Execute()
	return out.String(), err
}

func TestReportCommand(t *testing.T) {
	// results/NAME/latest -> RUN, as the lab lays it out.
	root := t.TempDir()
	runDir := filepath.Join(root, "autonomic", "20260101-000000")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"summary.json", "trace.csv"} {
		b, err := os.ReadFile(filepath.Join("../../report/testdata/autonomic", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(runDir, f), b, 0o644)
	}
	os.Symlink("20260101-000000", filepath.Join(root, "autonomic", "latest"))
	out, err := run(t, "report", filepath.Join(root, "autonomic"))
	if err != nil {
		t.Fatal(err)
	}
	// First the report's path, then the run's headline figures.
	if want := filepath.Join(root, "autonomic", "latest", "report.html"); strings.SplitN(out, "\n", 2)[0] != want {
		t.Fatalf("printed %q, want %q first", out, want)
	}
	if !strings.Contains(out, "threshold 15 ms: read wait p95") {
		t.Fatalf("figures missing: %q", out)
	}
	if _, err := os.Stat(filepath.Join(runDir, "report-trace-read-wait.png")); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "report", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no run here") {
		t.Fatalf("empty dir: %v", err)
	}
}

// A backup's run (the demo's) prints the reader's p95 and the backup's
// throughput with the agent off and on, and the oracle's, not raw JSON.
func TestReportInterferers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "20261126-111000")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../report/testdata/read-backup/summary.json") // lab run s05-afterlogin-6913216
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "report", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"baseline:        read wait p95  27.00 ms  readers  24.61 MB/s",
		"threshold 15 ms: read wait p95  16.00 ms (1.07×)", "( 99% kept)", "oracle    15 ms: read wait p95  15.25 ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"experiment"`) {
		t.Errorf("printed raw JSON:\n%s", out)
	}
	// Without its plot a run says nothing of a picture.
	if strings.Contains(out, "before/after") {
		t.Errorf("names a picture the run did not draw:\n%s", out)
	}
	// With it (the lab draws it), the report ends with the cure in one
	// line and the picture's path: what scripts/demo.sh ends with.
	if err := os.WriteFile(filepath.Join(dir, report.BeforeAfterPlot), []byte("png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err = run(t, "report", dir); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	want := "before/after: the reader's read wait p95 27.00 ms with the agent off, 16.00 ms with it on at 15 ms, the backup kept 99% of its throughput, same load, same run: /"
	if !strings.HasPrefix(last, want) || !strings.HasSuffix(last, "/20261126-111000/"+report.BeforeAfterPlot) {
		t.Errorf("last line %q, want %q...%s", last, want, report.BeforeAfterPlot)
	}
}

// sanqos-lab report (and sim) prints under each regulated run whom the agent
// slowed and why, from summary.json's event digest.
func TestReportEventDigest(t *testing.T) {
	s := report.ControlledSummary{Experiment: "read-backup", Interferers: "readers", Regulated: []report.ControlledRun{{ThresholdMs: 15,
		Events: report.DigestEvents([]report.EventRecord{
			{Consumer: "10.99.0.3", Kind: "slow", Direction: "read", Reason: "saturates the resource: 3.5 requests queued ≥ throttleable_queue 1.25"},
			{Consumer: "10.99.0.3", Kind: "held", Direction: "read", Reason: "held while idle: it keeps its delays for its next burst (idle_hold)"},
			{Consumer: "10.99.0.4", Kind: "slow", Direction: "read", Reason: "saturates the resource: reads 1.06 MB/s > throttleable_read_mb_s 1"},
		})}}}
	var b strings.Builder
	printControlled(&b, s)
	for _, want := range []string{
		"  10.99.0.3       slow 1, held 1 (read): saturates the resource: N requests queued ≥ throttleable_queue N\n",
		"  10.99.0.4       slow 1 (read): saturates the resource: reads N MB/s > throttleable_read_mb_s N\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}
