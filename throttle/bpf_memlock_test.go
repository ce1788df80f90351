package throttle

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones do
// not, and neither does a release that cannot be read count as one.
func TestMemlockCharged(t *testing.T) {
	for release, want := range map[string]bool{
		"4.19.0-27-amd64": true, "5.4.0-150-generic": true, "5.10.0-30-amd64": true,
		"5.11.0": false, "5.15.0-1-amd64": false, "6.1.0-56-amd64": false, "6.18.44-fc-v669": false,
		"": true, "vmlinux": true,
	} {
		if got := memlockCharged(release); got != want {
			t.Errorf("%q: charged %v, want %v", release, got, want)
		}
	}
}

// hasCapSysResource reports whether this process may raise a hard limit.
func hasCapSysResource(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// Before loading BPF objects on a kernel that charges them, a low
// RLIMIT_MEMLOCK is lifted: to infinity where the process may raise its
// hard limit (or it is infinite already), else to the hard limit, with a
// warning. On a kernel that does not charge them it is left alone.
func TestRaiseMemlock(t *testing.T) {
	var orig unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &orig); err != nil {
			t.Errorf("restoring RLIMIT_MEMLOCK: %v", err)
		}
	})
	lifted, warned := uint64(unix.RLIM_INFINITY), 0
	if orig.Max != unix.RLIM_INFINITY && !hasCapSysResource(t) {
		lifted, warned = orig.Max, 1
	}
	low := unix.Rlimit{Cur: min(64<<10, orig.Max), Max: orig.Max}
	for _, tc := range []struct {
		release string
		want    uint64
		warned  int
	}{{"6.1.0-56-amd64", low.Cur, 0}, {"5.10.0-30-amd64", lifted, warned}} {
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low); err != nil {
			t.Fatal(err)
		}
		h := &logRecords{}
		raiseMemlockFor(tc.release, slog.New(h))
		var got unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &got); err != nil {
			t.Fatal(err)
		}
		if got.Cur != tc.want {
			t.Errorf("kernel %s: RLIMIT_MEMLOCK %d after raiseMemlock, want %d", tc.release, got.Cur, tc.want)
		}
		if n := h.count(slog.LevelWarn, "RLIMIT_MEMLOCK"); n != tc.warned {
			t.Errorf("kernel %s: %d warnings, want %d", tc.release, n, tc.warned)
		}
	}
}
