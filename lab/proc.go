package lab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// FindProcs returns the pids whose argv matches.
func FindProcs(match func(argv []string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillAll sends SIGKILL to every pid and reaps none: they are not our
// children.
func KillAll(pids []int) {
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// alive reports whether pid runs; a zombie (a supervisor that died while
// the `lab up` that started it still waits for it) does not.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// isServe matches the lab's supervisor process.
func isServe(argv []string) bool {
	// sanqos-HASH: the copy the stock-kernel guest runs (lab/guest's
	// InstallBinary); with the bare name only, Down in the guest never
	// stopped the supervisor.
	base := filepath.Base(argv[0])
	return len(argv) == 3 && (base == "sanqos" || strings.HasPrefix(base, "sanqos-") || strings.HasSuffix(argv[0], ".test")) && argv[1] == "lab" && argv[2] == "serve"
}
