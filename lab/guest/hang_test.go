package guest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A guest killed at its time limit is reported with the test it was in
// and the kernel's first complaint, not only the console's repeats (a CI
// run's soft lockup in the throttle tests named neither).
func TestHangClues(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "output.log")
	if err := os.WriteFile(out, []byte("--- PASS: TestA (1.00s)\n=== RUN   TestB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	console := "[ 1.0] booted\n[ 73.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [throttle.test:491]\n[ 73.1] Call Trace: htb_dequeue\n" +
		strings.Repeat("[ 99.0] rcu: INFO: rcu_preempt self-detected stall on CPU\n", 3)
	for _, tc := range []struct {
		name, console, log string
		want, not          []string
	}{
		{"lockup and output", console, out, []string{"=== RUN   TestB", "soft lockup - CPU#0 stuck for 22s", "htb_dequeue"}, nil},
		{"no output file", console, filepath.Join(dir, "none"), []string{"soft lockup"}, []string{"output ends"}},
		{"a quiet console", "[ 1.0] booted\n", out, []string{"=== RUN   TestB"}, []string{"first complaint"}},
		{"a stall before the lockup", "[ 50.0] rcu: INFO: rcu_preempt detected stalls\n" + console, out, []string{"complaint:\n[ 50.0] rcu: INFO"}, nil},
	} {
		got := hangClues(tc.console, tc.log)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: %q has %q", tc.name, got, w)
			}
		}
	}
}
