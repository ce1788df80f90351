package packaging

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/sanqos/sanqos/internal/testenv"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The sandbox's seccomp filters, built as systemd builds them for
// SystemCallFilter, SystemCallArchitectures, RestrictNamespaces,
// RestrictAddressFamilies and MemoryDenyWriteExecute: the syscall names
// and @groups resolved to numbers (in the test, before the helper runs)
// and the classic BPF programs the helper installs. It is its own file
// because it is a small BPF assembler with its own vocabulary; the mount
// namespace is in sandbox_mounts_linux_test.go, the process limits stay
// in sandbox_linux_test.go.

// syscallNumbers expands systemd's syscall names and @groups
// (`systemd-analyze syscall-filter`) to x86_64 numbers (asm/unistd_64.h).
// Names of other architectures' calls, which systemd's groups also list,
// have no number here and are skipped, as systemd skips them.
func syscallNumbers(t testing.TB, items []string) []uint32 {
	t.Helper()
	testenv.RequireCommands(t, "systemd-analyze")
	out, err := exec.Command("systemd-analyze", "syscall-filter").Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter: %v", err)
	}
	groups := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.TrimSpace(l)
		switch {
		case f == "" || strings.HasPrefix(f, "#"):
			if f == "" {
				cur = ""
			}
		case strings.HasPrefix(l, "@"):
			cur = f
		case cur != "":
			groups[cur] = append(groups[cur], f)
		}
	}
	nrs := unistd(t)
	set := map[uint32]bool{}
	var expand func(string)
	expand = func(it string) {
		if strings.HasPrefix(it, "@") {
			g, ok := groups[it]
			if !ok {
				t.Fatalf("SystemCallFilter: no group %s in systemd-analyze syscall-filter", it)
			}
			for _, x := range g {
				expand(x)
			}
			return
		}
		if n, ok := nrs[it]; ok {
			set[n] = true
		}
	}
	for _, it := range items {
		if strings.HasPrefix(it, "~") {
			t.Fatalf("SystemCallFilter=%s: a deny list is not rebuilt", it)
		}
		expand(it)
	}
	var list []uint32
	for n := range set {
		list = append(list, n)
	}
	return list
}

// unistd maps x86_64 syscall names to numbers from the kernel's uapi
// header (linux-libc-dev).
func unistd(t testing.TB) map[string]uint32 {
	t.Helper()
	const h = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"
	f, err := os.Open(h)
	if err != nil {
		testenv.Missing(t, h+" missing (Debian's linux-libc-dev; run scripts/setup.sh)")
	}
	defer f.Close()
	m := map[string]uint32{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) == 3 && w[0] == "#define" && strings.HasPrefix(w[1], "__NR_") {
			if n, err := strconv.ParseUint(w[2], 10, 32); err == nil {
				m[strings.TrimPrefix(w[1], "__NR_")] = uint32(n)
			}
		}
	}
	if len(m) < 300 {
		t.Fatalf("%s: only %d syscalls", h, len(m))
	}
	return m
}

// Classic BPF over struct seccomp_data: nr at 0, arch at 4, args from 16
// (the low 32 bits of argument i at 16+8i on x86_64).
const (
	auditArchX8664 = 0xc000003e
	x32SyscallBit  = 0x40000000
	offNr          = 0
	offArch        = 4
	shmExec        = 0o100000 // SHM_EXEC, linux/shm.h
)

func offArg(i int) uint32 { return 16 + 8*uint32(i) }

// The instructions are golang.org/x/net/bpf's, as throttle's mark-to-class
// program: asm assembles one into the kernel's sock_filter.
func asm(i bpf.Instruction) unix.SockFilter {
	r, err := i.Assemble()
	if err != nil {
		panic(fmt.Sprintf("seccomp instruction %v: %v", i, err))
	}
	return unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
}
func ld(off uint32) unix.SockFilter { return asm(bpf.LoadAbsolute{Off: off, Size: 4}) }
func jeq(k uint32, jt, jf uint8) unix.SockFilter {
	return asm(bpf.JumpIf{Cond: bpf.JumpEqual, Val: k, SkipTrue: jt, SkipFalse: jf})
}
func jge(k uint32, jt, jf uint8) unix.SockFilter {
	return asm(bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: k, SkipTrue: jt, SkipFalse: jf})
}
func jset(k uint32, jt, jf uint8) unix.SockFilter {
	return asm(bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: k, SkipTrue: jt, SkipFalse: jf})
}
func and(k uint32) unix.SockFilter { return asm(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: k}) }
func ret(k uint32) unix.SockFilter { return asm(bpf.RetConstant{Val: k}) }

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	// Not allowed: SIGSYS. systemd kills the process outright; a trap
	// kills it as well, and lets a Go program print where it was.
	retKill = unix.SECCOMP_RET_TRAP
)

func retErrno(e syscall.Errno) unix.SockFilter { return ret(unix.SECCOMP_RET_ERRNO | uint32(e)) }

// archOr starts a filter: on a foreign ABI, action (the allow-list
// filter kills, the others leave it to that one); then loads nr.
func archOr(action uint32) []unix.SockFilter {
	return []unix.SockFilter{ld(offArch), jeq(auditArchX8664, 1, 0), ret(action), ld(offNr)}
}

// argBlock matches syscall nr and runs body (which must end in returns)
// on it; others skip past.
func argBlock(nr uint32, body ...unix.SockFilter) []unix.SockFilter {
	return append([]unix.SockFilter{jeq(nr, 0, uint8(len(body)))}, body...)
}

func (s *sandbox) filters() [][]unix.SockFilter {
	var out [][]unix.SockFilter
	if s.DenyNamespaces != nil {
		deny := *s.DenyNamespaces
		f := archOr(retAllow)
		// clone3's flags are in memory seccomp cannot read: ENOSYS, so
		// that callers fall back to clone.
		f = append(f, jeq(unix.SYS_CLONE3, 0, 1), retErrno(unix.ENOSYS))
		for _, nr := range []uint32{unix.SYS_UNSHARE, unix.SYS_CLONE} {
			f = append(f, argBlock(nr, ld(offArg(0)), jset(deny, 0, 1), retErrno(unix.EPERM), ret(retAllow))...)
		}
		if deny == allNamespaces() {
			f = append(f, jeq(unix.SYS_SETNS, 0, 1), retErrno(unix.EPERM))
		} else {
			// setns with type 0 (any) cannot be judged: refused.
			f = append(f, argBlock(unix.SYS_SETNS, ld(offArg(1)), jeq(0, 1, 0), jset(deny, 0, 1), retErrno(unix.EPERM), ret(retAllow))...)
		}
		out = append(out, append(f, ret(retAllow)))
	}
	if len(s.Families) > 0 {
		body := []unix.SockFilter{ld(offArg(0))}
		for _, af := range s.Families {
			body = append(body, jeq(af, 0, 1), ret(retAllow))
		}
		body = append(body, retErrno(unix.EAFNOSUPPORT))
		f := append(archOr(retAllow), argBlock(unix.SYS_SOCKET, body...)...)
		out = append(out, append(f, ret(retAllow)))
	}
	if s.MDWE {
		f := archOr(retAllow)
		f = append(f, argBlock(unix.SYS_MMAP, ld(offArg(2)), and(unix.PROT_EXEC|unix.PROT_WRITE),
			jeq(unix.PROT_EXEC|unix.PROT_WRITE, 0, 1), retErrno(unix.EPERM), ret(retAllow))...)
		for _, nr := range []uint32{unix.SYS_MPROTECT, unix.SYS_PKEY_MPROTECT} {
			f = append(f, argBlock(nr, ld(offArg(2)), jset(unix.PROT_EXEC, 0, 1), retErrno(unix.EPERM), ret(retAllow))...)
		}
		f = append(f, argBlock(unix.SYS_SHMAT, ld(offArg(2)), jset(shmExec, 0, 1), retErrno(unix.EPERM), ret(retAllow))...)
		out = append(out, append(f, ret(retAllow)))
	}
	// The allow-list goes last: seccomp(2) itself is outside it.
	if len(s.Syscalls) > 0 || s.NativeOnly {
		f := archOr(unix.SECCOMP_RET_KILL_PROCESS)
		f = append(f, jge(x32SyscallBit, 0, 1), ret(unix.SECCOMP_RET_KILL_PROCESS))
		if len(s.Syscalls) > 0 {
			for _, n := range s.Syscalls {
				f = append(f, jeq(n, 0, 1), ret(retAllow))
			}
			f = append(f, ret(retKill))
		} else {
			f = append(f, ret(retAllow))
		}
		out = append(out, f)
	}
	return out
}

func allNamespaces() uint32 {
	var m uint32
	for _, f := range namespaceFlags {
		m |= f
	}
	return m
}

// seccomp installs the filters on every thread of the process (TSYNC);
// exec keeps them.
func (s *sandbox) seccomp() error {
	for _, f := range s.filters() {
		prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
		r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
		if errno != 0 {
			return fmt.Errorf("seccomp: %w", errno)
		}
		if r != 0 {
			return fmt.Errorf("seccomp: thread %d could not be synchronised", r)
		}
	}
	return nil
}
