package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"
	"github.com/sanqos/sanqos/report"
)

func TestHostCPUUse(t *testing.T) {
	a := procfs.CPUStat{User: 100, System: 50, Idle: 1000, Iowait: 10, SoftIRQ: 5, Steal: 2}
	tests := []struct {
		name string
		b    procfs.CPUStat
		want report.HostCPU
	}{
		{"idle", procfs.CPUStat{User: 100, System: 50, Idle: 1010, Iowait: 10, SoftIRQ: 5, Steal: 2}, report.HostCPU{}},
		// 2 CPUs over 10 s: 6 s busy, 1 s stolen, 13 s idle or waiting.
		{"busy and stolen", procfs.CPUStat{User: 104, System: 51, Idle: 1011, Iowait: 12, SoftIRQ: 6, Steal: 3}, report.HostCPU{BusyPct: 30, StealPct: 5}},
		{"nothing elapsed", a, report.HostCPU{}},
		// A counter that went backwards (CPU hot-unplug) counts as zero.
		{"counter went back", procfs.CPUStat{User: 90, System: 50, Idle: 1010, Iowait: 10, SoftIRQ: 5, Steal: 2}, report.HostCPU{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hostCPUUse(a, tt.b); got != tt.want {
				t.Errorf("hostCPUUse = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The reading comes from this machine's /proc/stat: something has run.
func TestHostCPUReadsProc(t *testing.T) {
	s, err := hostCPU()
	if err != nil {
		t.Fatal(err)
	}
	if s.User+s.System <= 0 || s.Idle <= 0 {
		t.Errorf("implausible /proc/stat totals: %+v", s)
	}
}

// TestPhaseHostWatchesStallsUnlessTold: a phase's host watch records its
// stalls (count in Host, every one in stalls.csv) by default, and with
// --no-stall-watch (watchHost(false)) neither: the summary then has no
// stalls at all rather than a count of zero.
func TestPhaseHostWatchesStallsUnlessTold(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the stall watch needs real-time priority: run as root")
	}
	dir := t.TempDir()
	for _, watch := range []bool{true, false} {
		path := filepath.Join(dir, fmt.Sprintf("stalls-%v.csv", watch))
		res := &PhaseResult{}
		if err := watchHost(watch).stop(res, path); err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(path)
		if res.StallsWatched() != watch || (res.Host.Stalls != nil) != watch || (statErr == nil) != watch {
			t.Errorf("watch %v: watched %v, Host.Stalls %+v, stalls.csv: %v", watch, res.StallsWatched(), res.Host.Stalls, statErr)
		}
	}
}
