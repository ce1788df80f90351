package packaging

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/sanqos/sanqos/internal/testenv"
	"golang.org/x/sys/unix"
)

// probeEnv makes the test binary, run in the sandbox, try the calls the
// sandbox must allow or refuse and print what each returned (runProbes).
const probeEnv = "SANQOS_PACKAGING_PROBE"

// probeResult is a call's outcome: "ok" or the errno's name.
func probeResult(err error) string {
	var errno unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	default:
		return err.Error()
	}
}

// runProbes makes each call once, prints {call: result} as JSON and, if
// kill is set, ends with a call outside any allow-list (syslog's buffer
// size, harmless where it is allowed), which the sandbox must kill.
func runProbes(kill bool) {
	res := map[string]string{}
	sock := func(name string, af int) {
		fd, err := unix.Socket(af, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		res["socket "+name] = probeResult(err)
	}
	sock("AF_PACKET", unix.AF_PACKET)
	sock("AF_ALG", unix.AF_ALG)
	sock("AF_NETLINK", unix.AF_NETLINK)
	runtime.LockOSThread() // never unlocked: namespaces stay on this thread
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		res["open ns"] = err.Error()
	} else {
		res["setns 0"] = probeResult(unix.Setns(int(own.Fd()), 0))
		res["setns net"] = probeResult(unix.Setns(int(own.Fd()), unix.CLONE_NEWNET))
	}
	res["unshare net"] = probeResult(unix.Unshare(unix.CLONE_NEWNET))
	res["unshare mnt"] = probeResult(unix.Unshare(unix.CLONE_NEWNS))
	_, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	res["clone3"] = probeResult(errnoOrNil(e))
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err == nil {
		unix.Munmap(b)
	}
	res["mmap wx"] = probeResult(err)
	// BPF_MAP_CREATE of a one-entry array: what edt and the write caps
	// do first (the syscall, CAP_BPF, the memlock limit).
	attr := struct{ typ, key, value, max, flags uint32 }{2 /* BPF_MAP_TYPE_ARRAY */, 4, 8, 1, 0}
	fd, _, e := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e == 0 {
		unix.Close(int(fd))
	}
	res["bpf map"] = probeResult(errnoOrNil(e))
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(3)
	}
	if kill {
		unix.Syscall(unix.SYS_SYSLOG, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, 0, 0)
		fmt.Fprintln(os.Stderr, "syslog(2) was allowed")
	}
	os.Exit(0)
}

func errnoOrNil(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// copySelf copies the test binary into dir: the sandbox hides /tmp,
// where go test keeps it.
func copySelf(t testing.TB, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p := filepath.Join(dir, "packaging.test")
	dst, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// The sandbox does what the unit says, so that the agent's tests under it
// mean something: the process holds the unit's capabilities and no
// others, no_new_privs, one seccomp filter per kind; the filters refuse
// and allow the calls the unit's directives name, and kill a call outside
// the allow-list; the file system is read-only but for the unit's
// writable paths, with /tmp private and the home directories hidden.
// It is long because its three subtests (process, calls, files) share the
// unit, the sandbox's directory and the test binary copied into it.
func TestSandboxIsTheUnits(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "systemd-analyze", "ip")
	u, _ := readUnit(t)
	dir := sandboxDir(t)
	rw := filepath.Join(dir, "run")
	self := copySelf(t, dir)

	t.Run("process", func(t *testing.T) {
		s := newSandbox(t, u, rw, []string{"/bin/cat", "/proc/self/status"})
		out, err := s.command(t, "").Output()
		if err != nil {
			t.Fatalf("cat /proc/self/status in the sandbox: %v", err)
		}
		want, err := capMask(u.list("Service", "CapabilityBoundingSet"))
		if err != nil {
			t.Fatal(err)
		}
		st := parseStatus(string(out))
		for k, v := range map[string]string{
			"CapEff": fmt.Sprintf("%016x", want), "CapPrm": fmt.Sprintf("%016x", want), "CapBnd": fmt.Sprintf("%016x", want),
			"CapInh": "0000000000000000", "CapAmb": "0000000000000000",
			"NoNewPrivs": "1", "Seccomp": "2", "Seccomp_filters": strconv.Itoa(len(s.filters())),
		} {
			if st[k] != v {
				t.Errorf("%s: %q, want %q", k, st[k], v)
			}
		}
		if len(s.filters()) != 4 {
			t.Errorf("%d seccomp filters, want 4 (calls, namespaces, families, W^X)", len(s.filters()))
		}
	})

	t.Run("calls", func(t *testing.T) {
		s := newSandbox(t, u, rw, []string{self})
		cmd := s.command(t, "")
		cmd.Env = append(cmd.Env, probeEnv+"=kill")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil || !strings.Contains(stderr.String(), "SIGSYS") {
			t.Errorf("syslog(2), outside the allow-list, did not kill the probe: %v\n%s", err, stderr.String())
		}
		var got map[string]string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("probe output %q: %v\n%s", out, err, stderr.String())
		}
		t.Logf("in the sandbox: %v", got)
		in := func(af uint32) string { return cond(slices.Contains(s.Families, af), "ok", "EAFNOSUPPORT") }
		want := map[string]string{
			"socket AF_PACKET": in(unix.AF_PACKET), "socket AF_ALG": in(unix.AF_ALG), "socket AF_NETLINK": in(unix.AF_NETLINK),
			// The namespace filter's refusals.
			"setns 0": "EPERM", "clone3": "ENOSYS", "unshare mnt": "EPERM",
			"setns net":   cond(*s.DenyNamespaces&unix.CLONE_NEWNET == 0, "ok", "EPERM"),
			"unshare net": cond(*s.DenyNamespaces&unix.CLONE_NEWNET == 0, "ok", "EPERM"),
			"mmap wx":     cond(s.MDWE, "EPERM", "ok"),
			"bpf map":     "ok",
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s, want %s", k, got[k], v)
			}
		}
	})

	t.Run("files", func(t *testing.T) {
		script := `set -u
w() { if (: >"$1") 2>/dev/null; then echo "$1 writable"; rm -f "$1"; else echo "$1 read-only"; fi; }
w /etc/sanqos-packaging-probe
w /run/sanqos-packaging-probe
w /proc/sys/kernel/sanqos-probe
w ` + rw + `/probe
w /tmp/probe
ls /root >/dev/null 2>&1 && echo "/root visible" || echo "/root hidden"
[ -z "$(ls -A /tmp)" ] && echo "/tmp private" || echo "/tmp shared"
`
		s := newSandbox(t, u, rw, []string{"/bin/sh", "-c", script})
		out, err := s.command(t, "").CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		want := "/etc/sanqos-packaging-probe read-only\n/run/sanqos-packaging-probe read-only\n/proc/sys/kernel/sanqos-probe read-only\n" +
			rw + "/probe writable\n/tmp/probe writable\n/root hidden\n/tmp private\n"
		if string(out) != want {
			t.Errorf("in the sandbox:\n%s\nwant:\n%s", out, want)
		}
	})
}

func cond(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

// parseStatus reads /proc/PID/status into key → value.
func parseStatus(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}
