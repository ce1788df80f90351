package lab

import (
	"os"
	"path/filepath"
	"slices"
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

// supervisors are the lab supervisors that run, whatever their binary
// is called: a process `X lab serve` whose environment has the label Up
// starts it with (serveEnv), the label every sanqos has given its
// supervisor. Identification by argv[0] missed a binary called
// bar-sanqos (issue 56).
func supervisors() []Proc {
	var out []Proc
	for _, pid := range FindProcs(func(argv []string) bool {
		return len(argv) == 3 && argv[1] == "lab" && argv[2] == "serve"
	}) {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil || !hasEnv(env, serveEnv+"=1") || !alive(pid) {
			continue
		}
		if p, err := procOf(pid); err == nil {
			cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			p.What = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
			out = append(out, p)
		}
	}
	return out
}

// hasEnv reports whether a NUL-separated environment holds kv.
func hasEnv(env []byte, kv string) bool {
	return slices.Contains(strings.Split(string(env), "\x00"), kv)
}

// procsOf are the live processes among pids, with their start times and
// command lines.
func procsOf(pids []int) []Proc {
	var out []Proc
	for _, pid := range pids {
		if p, err := procOf(pid); err == nil && alive(pid) {
			cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			p.What = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
			out = append(out, p)
		}
	}
	return out
}
