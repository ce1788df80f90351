package experiments

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/lab"
)

// The foundation's acceptance test on the experiments' side: a real lab,
// a short interference run, the 3x effect on the reader's p95 wait, and
// nothing left after Down.
func TestLabInterferenceAndCleanDown(t *testing.T) {
	upLab(t)
	results := t.TempDir()
	dir, err := RunExperiment(context.Background(), "interference", Options{RunOptions: lab.RunOptions{Scale: 0.1, Results: results, Repeat: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var sum InterferenceSummary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Runs) != 4 {
		t.Fatalf("runs: %+v", sum.Runs)
	}
	none, twelve := sum.Runs[0], sum.Runs[3]
	t.Logf("p95 read wait: 0 writers %.2f ms, 12 writers %.2f ms (%.1fx); writes %.1f MB/s", none.ReadWaitMs.P95, twelve.ReadWaitMs.P95, sum.P95Ratio12, twelve.WriteMBs)
	if none.ReadWaitMs.N < 10 || twelve.ReadWaitMs.N < 10 {
		t.Fatalf("too few read-wait samples: %d, %d", none.ReadWaitMs.N, twelve.ReadWaitMs.N)
	}
	if twelve.ReadWaitMs.P95 < 3*none.ReadWaitMs.P95 {
		t.Errorf("12 writers raised p95 read wait only from %.2f to %.2f ms (< 3x)", none.ReadWaitMs.P95, twelve.ReadWaitMs.P95)
	}
	if none.WriteMBs != 0 || twelve.WriteMBs < 5 {
		t.Errorf("write rates: none %.2f, twelve %.2f MB/s", none.WriteMBs, twelve.WriteMBs)
	}
	for _, f := range []string{"trace.csv", "read-wait.png", "writers-12.r0/b3.json", "writers-12.r0/b2.fio", "report.html", "report-wait-vs-writers.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing result file: %v", err)
		}
	}
	trace, _ := os.ReadFile(filepath.Join(dir, "trace.csv"))
	if n := strings.Count(string(trace), "\n"); n < 4*4*100 {
		t.Errorf("trace has %d rows, want one per device per 100 ms", n)
	}
}
