package pkgdeb

import (
	"os/exec"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
)

func TestDebianVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-rc1", "1.2.3~rc1"},
		{"v1.2.3-4-gabcdef0", "1.2.3+git4.abcdef0"},
		{"v1.2.3-rc1-4-gabcdef0", "1.2.3~rc1+git4.abcdef0"},
		{"v1.2.3-4-gabcdef0-dirty", "1.2.3+git4.abcdef0+dirty"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"abcdef0", "0~git.abcdef0"},
		{"823f853", "0~git.823f853"},
		{"823f853-dirty", "0~git.823f853+dirty"},
	} {
		got, err := DebianVersion(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("DebianVersion(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"dev", "", "vX", "release_1", "v1.2:3", "-dirty"} {
		if got, err := DebianVersion(bad); err == nil {
			t.Errorf("DebianVersion(%q) = %q, want an error", bad, got)
		}
	}
}

// The versions sort, by dpkg's own rules, in the order the builds were
// made: an upgrade from one build to a later one is an upgrade to dpkg.
func TestDebianVersionOrder(t *testing.T) {
	testenv.RequireCommands(t, "dpkg")
	builds := []string{
		"abcdef0",                  // no tag yet
		"abcdef0-dirty",            // ... edited
		"v0.9.0",                   // the first tag
		"v1.0.0-rc1",               // a pre-release
		"v1.0.0-rc1-2-g1234567",    // after it
		"v1.0.0",                   // the release
		"v1.0.0-dirty",             // edited, uncommitted
		"v1.0.0-3-gabcdef0",        // three commits later
		"v1.0.0-12-g0123456",       // twelve (numeric, not string, order)
		"v1.0.0-12-g0123456-dirty", // ... edited
		"v1.0.1",                   // the next release
	}
	for i := 1; i < len(builds); i++ {
		a, errA := DebianVersion(builds[i-1])
		b, errB := DebianVersion(builds[i])
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if err := exec.Command("dpkg", "--compare-versions", a, "lt", b).Run(); err != nil {
			t.Errorf("%s (%s) does not sort before %s (%s): %v", builds[i-1], a, builds[i], b, err)
		}
	}
}

func TestDebArch(t *testing.T) {
	for goarch, want := range map[string]string{"amd64": "amd64", "arm64": "arm64", "386": "i386", "arm": "armhf", "ppc64le": "ppc64el"} {
		if got, err := debArch("linux", goarch); err != nil || got != want {
			t.Errorf("debArch(linux, %s) = %q, %v; want %q", goarch, got, err, want)
		}
	}
	if _, err := debArch("darwin", "arm64"); err == nil {
		t.Error("a darwin binary was accepted")
	}
	if _, err := debArch("linux", "wasm"); err == nil {
		t.Error("GOARCH=wasm was accepted")
	}
}
