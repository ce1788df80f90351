// Package testenv holds the checks that tests needing real kernel features
// (root, network namespaces, iptables, tgtd, fio) make before they start,
// and what several packages' such tests share (a scratch namespace, a
// command that must succeed, a block device of the machine).
// Outside CI a missing prerequisite skips the test with the reason; in CI
// (CI=true) it fails the test, so a lab test can never pass by not running.
//
// Imports (sanqos): none.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether we run under .ci/run.
func InCI() bool { return os.Getenv("CI") == "true" }

// missing skips or fails t with why.
func missing(t testing.TB, why string) {
	t.Helper()
	if InCI() {
		t.Fatalf("prerequisite missing in CI: %s", why)
	}
	t.Skipf("prerequisite missing (fails in CI): %s", why)
}

// Missing is for prerequisites the Require helpers do not cover (a
// kernel interface, a device, a file of this machine): it skips t with
// why, and fails it in CI. Not for a test whose premise this machine
// simply does not meet (a kernel that has the feature whose absence the
// test covers): that is no missing prerequisite, and failing CI on it
// would be wrong.
func Missing(t testing.TB, why string) {
	t.Helper()
	missing(t, why)
}

// RequireRoot needs uid 0 (netns, netfilter, loop devices, tgtd).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "test needs root")
	}
}

// RequireCommands needs each named program on PATH.
func RequireCommands(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			missing(t, n+" not installed (run scripts/setup.sh)")
		}
	}
}

// Chromium returns the path of a headless-capable Chromium (Debian's
// `chromium`, installed by scripts/setup.sh) for browser tests.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	missing(t, "chromium not installed (run scripts/setup.sh)")
	return ""
}
