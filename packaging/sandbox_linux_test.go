package packaging

// The unit's sandbox, rebuilt without systemd: this machine (and CI) has
// no systemd as PID 1, so `systemd-run` cannot apply it. The test binary
// re-executes itself as a helper (TestMain, sandboxEnv) which, as root,
// does what systemd's executor does before it execs the agent: a private
// mount namespace with the unit's read-only, inaccessible, private and
// writable paths; the capability bounding set; no_new_privs; the
// rlimits and umask; and seccomp filters built as systemd builds them for
// SystemCallFilter (kill), SystemCallArchitectures, RestrictNamespaces,
// RestrictAddressFamilies and MemoryDenyWriteExecute. Then it execs the
// command. What is not rebuilt is listed, with why it cannot matter to
// the agent, in sandboxDirectives.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"golang.org/x/sys/unix"
)

// sandboxEnv carries the helper's spec (JSON) to the re-executed test binary.
const sandboxEnv = "SANQOS_PACKAGING_SANDBOX"

func TestMain(m *testing.M) {
	if spec := os.Getenv(sandboxEnv); spec != "" {
		runSandbox(spec) // never returns
	}
	if p := os.Getenv(probeEnv); p != "" {
		runProbes(p == "kill") // never returns
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// sandbox is what the helper applies before exec'ing Argv.
type sandbox struct {
	Argv []string
	// Mounts, in order.
	ReadOnlyAll  bool     // ProtectSystem=strict: every mount read-only but /dev, /proc, /sys
	ReadOnly     []string // ProtectKernelTunables, ProtectControlGroups: these (and mounts below) read-only
	Inaccessible []string // ProtectHome, ProtectKernelModules
	Tmpfs        []string // PrivateTmp
	ReadWrite    []string // ReadWritePaths, RuntimeDirectory (the test's stand-in); "-" prefix: may be missing
	// Process.
	Caps       []uint // the bounding set
	NoNewPrivs bool
	Memlock    string // LimitMEMLOCK: "infinity" or bytes; "" unchanged
	Umask      int    // -1 unchanged
	// Seccomp; nil or empty: no such filter.
	Syscalls       []uint32 // allowed (SystemCallFilter allow-list); others: SIGSYS
	NativeOnly     bool     // SystemCallArchitectures=native
	DenyNamespaces *uint32  // RestrictNamespaces: clone flags of the namespace kinds denied
	Families       []uint32 // RestrictAddressFamilies allow-list
	MDWE           bool     // MemoryDenyWriteExecute
}

// sandboxDirectives says, for every [Service] directive the unit may
// hold, whether the sandbox rebuilds it and if not why that cannot matter
// for the agent. A directive missing here fails the test: whoever adds it
// to the unit decides.
var sandboxDirectives = map[string]string{
	"Type": "process", "ExecStart": "process", "ExecReload": "process", "ExecStartPre": "process",
	"KillSignal": "process", "KillMode": "process", "TimeoutStopSec": "process",
	"Restart": "process", "RestartSec": "process",
	"User":                  "rebuilt: the tests run as root",
	"CapabilityBoundingSet": "rebuilt", "NoNewPrivileges": "rebuilt", "LimitMEMLOCK": "rebuilt", "UMask": "rebuilt",
	"RuntimeDirectory":     "rebuilt: a writable directory of the test's takes /run/sanqos's place (the config's socket)",
	"RuntimeDirectoryMode": "rebuilt (as above)",
	"ProtectSystem":        "rebuilt", "ReadWritePaths": "rebuilt", "ProtectHome": "rebuilt", "PrivateTmp": "rebuilt",
	"ProtectKernelTunables": "rebuilt (/proc/sys and /sys read-only)", "ProtectKernelModules": "rebuilt (modules directory inaccessible; the syscalls are outside the filter anyway)",
	"ProtectControlGroups":    "rebuilt (under /sys)",
	"RestrictAddressFamilies": "rebuilt", "RestrictNamespaces": "rebuilt", "MemoryDenyWriteExecute": "rebuilt",
	"SystemCallArchitectures": "rebuilt", "SystemCallFilter": "rebuilt",
	"ProtectKernelLogs": "not rebuilt: hides /proc/kmsg and /dev/kmsg, which the agent never opens",
	"ProtectClock":      "not rebuilt: @clock is outside the syscall filter already, and its device policy only matters to opened devices (the agent stats them)",
	"ProtectHostname":   "not rebuilt: a UTS namespace; the agent never sets the hostname",
	"RestrictRealtime":  "not rebuilt: nothing in the agent, iptables or tgtadm asks for realtime scheduling",
	"RestrictSUIDSGID":  "not rebuilt: the agent creates no set-id file",
	"LockPersonality":   "not rebuilt: nothing calls personality(2)",
}

// namespaceFlags are RestrictNamespaces' kinds (systemd's namespace_info).
var namespaceFlags = map[string]uint32{
	"cgroup": unix.CLONE_NEWCGROUP, "ipc": unix.CLONE_NEWIPC, "net": unix.CLONE_NEWNET, "mnt": unix.CLONE_NEWNS,
	"pid": unix.CLONE_NEWPID, "user": unix.CLONE_NEWUSER, "uts": unix.CLONE_NEWUTS,
}

// familyNumbers are the address families the unit may name.
var familyNumbers = map[string]uint32{
	"AF_UNIX": unix.AF_UNIX, "AF_INET": unix.AF_INET, "AF_INET6": unix.AF_INET6,
	"AF_NETLINK": unix.AF_NETLINK, "AF_PACKET": unix.AF_PACKET,
}

// newSandbox builds the sandbox of u's [Service] for argv. rw is the
// test's writable directory (RuntimeDirectory's stand-in).
// It is one function because it is one pass over the unit's [Service]
// directives, a few lines each, into one sandbox.
func newSandbox(t testing.TB, u *unit, rw string, argv []string) *sandbox {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		testenv.Missing(t, "the seccomp filters are built for x86_64 only")
	}
	s := &sandbox{Argv: argv, Umask: -1}
	seen := map[string]bool{}
	for _, d := range u.dirs {
		if d.section != "Service" || seen[d.key] {
			continue
		}
		seen[d.key] = true
		if _, ok := sandboxDirectives[d.key]; !ok {
			t.Fatalf("%s line %d: %s: the sandbox does not know it; add it to sandboxDirectives (rebuilt, or why it cannot matter)", unitFile, d.line, d.key)
		}
	}
	yes := func(k string) bool { return u.last("Service", k) == "yes" || u.last("Service", k) == "true" }
	if v := u.last("Service", "User"); v != "" && v != "root" {
		t.Fatalf("User=%s: the sandbox runs the agent as root", v)
	}
	switch v := u.last("Service", "ProtectSystem"); v {
	case "strict":
		s.ReadOnlyAll = true
	case "":
	default:
		t.Fatalf("ProtectSystem=%s: the sandbox rebuilds strict only", v)
	}
	if yes("ProtectKernelTunables") {
		s.ReadOnly = append(s.ReadOnly, "/proc/sys", "/sys")
	}
	if yes("ProtectControlGroups") {
		s.ReadOnly = append(s.ReadOnly, "/sys/fs/cgroup")
	}
	if yes("ProtectHome") {
		s.Inaccessible = append(s.Inaccessible, "/home", "/root", "/run/user")
	}
	if yes("ProtectKernelModules") {
		s.Inaccessible = append(s.Inaccessible, "/usr/lib/modules", "/lib/modules")
	}
	if yes("PrivateTmp") {
		s.Tmpfs = append(s.Tmpfs, "/tmp", "/var/tmp")
	}
	s.ReadWrite = append(u.list("Service", "ReadWritePaths"), rw)
	caps := u.list("Service", "CapabilityBoundingSet")
	for _, c := range caps {
		n, ok := capNumbers[c]
		if !ok {
			t.Fatalf("CapabilityBoundingSet: %s not in capNumbers (a ~ deny list is not rebuilt)", c)
		}
		s.Caps = append(s.Caps, n)
	}
	if len(caps) == 0 {
		t.Fatal("no CapabilityBoundingSet: the sandbox would run with every capability")
	}
	s.NoNewPrivs = yes("NoNewPrivileges")
	s.Memlock = u.last("Service", "LimitMEMLOCK")
	if s.Memlock != "" && !canRaiseRlimits() {
		// systemd (PID 1) raises it; this test cannot here. Kernels from
		// 5.11 charge BPF maps to the cgroup instead, and nothing else in
		// the agent locks memory.
		t.Logf("LimitMEMLOCK=%s not rebuilt: this process lacks CAP_SYS_RESOURCE", s.Memlock)
		s.Memlock = ""
	}
	if v := u.last("Service", "UMask"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil {
			t.Fatalf("UMask=%s: %v", v, err)
		}
		s.Umask = int(m)
	}
	s.NativeOnly = u.last("Service", "SystemCallArchitectures") == "native"
	s.MDWE = yes("MemoryDenyWriteExecute")
	if f := u.list("Service", "SystemCallFilter"); len(f) > 0 {
		s.Syscalls = syscallNumbers(t, append([]string{"@default"}, f...)) // systemd adds @default to an allow-list
	}
	switch v := u.last("Service", "RestrictNamespaces"); v {
	case "", "no", "false":
	default:
		var deny uint32
		allowed := map[string]bool{}
		if v != "yes" && v != "true" {
			if strings.HasPrefix(v, "~") {
				t.Fatalf("RestrictNamespaces=%s: a deny list is not rebuilt", v)
			}
			for _, k := range strings.Fields(v) {
				if _, ok := namespaceFlags[k]; !ok {
					t.Fatalf("RestrictNamespaces: unknown kind %s", k)
				}
				allowed[k] = true
			}
		}
		for k, f := range namespaceFlags {
			if !allowed[k] {
				deny |= f
			}
		}
		s.DenyNamespaces = &deny
	}
	for _, f := range u.list("Service", "RestrictAddressFamilies") {
		n, ok := familyNumbers[f]
		if !ok {
			t.Fatalf("RestrictAddressFamilies: %s not in familyNumbers (a ~ deny list is not rebuilt)", f)
		}
		s.Families = append(s.Families, n)
	}
	return s
}

// canRaiseRlimits reports whether this process holds CAP_SYS_RESOURCE.
func canRaiseRlimits() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capget(&hdr, &data[0]) == nil && data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) != 0
}

// command is the exec.Cmd that runs s's Argv in the sandbox, in network
// namespace ns (ip netns exec) if not "".
func (s *sandbox) command(t testing.TB, ns string) *exec.Cmd {
	t.Helper()
	spec, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if ns != "" {
		cmd = exec.Command("ip", "netns", "exec", ns, self)
	} else {
		cmd = exec.Command(self)
	}
	cmd.Env = append(os.Environ(), sandboxEnv+"="+string(spec))
	return cmd
}

// runSandbox is the helper: it applies the spec and execs its Argv.
func runSandbox(spec string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(125)
	}
	var s sandbox
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fail(err)
	}
	// Mounts, the bounding set and no_new_privs belong to the thread, and
	// exec takes the calling thread's.
	runtime.LockOSThread()
	if err := s.mounts(); err != nil {
		fail(err)
	}
	if err := s.process(); err != nil {
		fail(err)
	}
	if err := s.seccomp(); err != nil {
		fail(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, sandboxEnv+"=") })
	fail(unix.Exec(s.Argv[0], s.Argv, env))
}

func (s *sandbox) process() error {
	if s.Umask >= 0 {
		unix.Umask(s.Umask)
	}
	if s.Memlock != "" {
		lim := uint64(unix.RLIM_INFINITY)
		if s.Memlock != "infinity" {
			n, err := strconv.ParseUint(s.Memlock, 10, 64)
			if err != nil {
				return fmt.Errorf("LimitMEMLOCK=%s: %w", s.Memlock, err)
			}
			lim = n
		}
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
			return fmt.Errorf("RLIMIT_MEMLOCK: %w", err)
		}
	}
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil {
		return err
	}
	keep := map[uint]bool{}
	for _, c := range s.Caps {
		keep[c] = true
	}
	// Dropping needs CAP_SETPCAP: it goes last.
	order := make([]int, 0, n+1)
	for c := 0; c <= n; c++ {
		if c != unix.CAP_SETPCAP {
			order = append(order, c)
		}
	}
	for _, c := range append(order, unix.CAP_SETPCAP) {
		if !keep[uint(c)] {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d: %w", c, err)
			}
		}
	}
	// Root's exec gives it the bounding set; inherited and ambient
	// capabilities could add to it, so clear them as systemd does.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	if s.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	return nil
}

// sandboxDir is a fresh directory for a test's config and socket, in /run
// (visible in the sandbox, unlike /tmp), removed at cleanup.
func sandboxDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/run", "sanqos-packaging-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Mkdir(filepath.Join(d, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}
