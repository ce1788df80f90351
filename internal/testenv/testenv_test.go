package testenv

import (
	"fmt"
	"runtime"
	"testing"
)

// recorder is a testing.TB that records how it was ended instead of
// ending the test; like testing's, Fatalf and Skipf end the goroutine.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Missing skips outside CI and fails in CI, saying why either way.
func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		ci   string
		fail bool
		want string
	}{
		{"true", true, "prerequisite missing in CI: no widget"},
		{"", false, "prerequisite missing (fails in CI): no widget"},
		{"1", false, "prerequisite missing (fails in CI): no widget"}, // only CI=true is CI
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := &recorder{}
			done := make(chan struct{})
			go func() { defer close(done); Missing(r, "no widget") }()
			<-done
			got, other := r.skip, r.fatal
			if tc.fail {
				got, other = r.fatal, r.skip
			}
			if got != tc.want || other != "" {
				t.Errorf("fatal %q, skip %q; want fail=%v with %q", r.fatal, r.skip, tc.fail, tc.want)
			}
		})
	}
}

// Run returns a command's output, and fails t with the command line and
// output when it fails.
func TestRun(t *testing.T) {
	if got := Run(t, "sh", "-c", "echo out; echo err >&2"); got != "out\nerr\n" {
		t.Errorf("Run: %q, want both streams", got)
	}
	r := &recorder{}
	done := make(chan struct{})
	go func() { defer close(done); Run(r, "sh", "-c", "echo why; exit 3") }()
	<-done
	if want := "sh -c echo why; exit 3: exit status 3\nwhy\n"; r.fatal != want {
		t.Errorf("failing command: fatal %q, want %q", r.fatal, want)
	}
}
