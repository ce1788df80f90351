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
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

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

// mountPoints lists the mount points at or below root, from
// /proc/self/mountinfo (octal escapes undone), outermost first.
func mountPoints(root string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == root || root == "/" || strings.HasPrefix(p, root+"/") {
			out = append(out, p)
		}
	}
	return out, nil
}

func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountFlags are the per-mount flags of the mount at p (statfs's ST_*
// flags as MS_* ones), but read-only, which the caller sets.
func mountFlags(p string) (uintptr, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return 0, err
	}
	var fl uintptr
	for stFlag, ms := range map[int64]uintptr{
		unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME,
	} {
		if st.Flags&stFlag != 0 {
			fl |= ms
		}
	}
	return fl, nil
}

// remountRO makes the mount at p read-only, keeping its other flags.
func remountRO(p string) error {
	fl, err := mountFlags(p)
	if err != nil {
		return err
	}
	return unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|fl, "")
}

// remountRW makes the (bind) mount at p writable again, keeping its flags.
func remountRW(p string) error {
	fl, err := mountFlags(p)
	if err != nil {
		return err
	}
	return unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|fl, "")
}

func under(p string, roots ...string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

func (s *sandbox) mounts() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	roAt := func(root string, skip ...string) error {
		mps, err := mountPoints(root)
		if err != nil {
			return err
		}
		for _, p := range mps {
			if under(p, skip...) {
				continue
			}
			if err := remountRO(p); err != nil && !os.IsNotExist(err) && err != unix.EACCES {
				return fmt.Errorf("read-only %s: %w", p, err)
			}
		}
		return nil
	}
	if s.ReadOnlyAll {
		if err := roAt("/", "/dev", "/proc", "/sys"); err != nil {
			return err
		}
	}
	for _, p := range s.ReadOnly {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		mps, err := mountPoints(p)
		if err != nil {
			return err
		}
		if len(mps) == 0 || mps[0] != p {
			// Not a mount point: bind it onto itself first.
			if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind %s: %w", p, err)
			}
		}
		if err := roAt(p); err != nil {
			return err
		}
	}
	for _, p := range s.Inaccessible {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue // absent, or a symlink into a directory handled by its own entry
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=000,size=4k"); err != nil {
			return fmt.Errorf("inaccessible %s: %w", p, err)
		}
		if err := remountRO(p); err != nil {
			return fmt.Errorf("inaccessible %s: %w", p, err)
		}
	}
	for _, p := range s.Tmpfs {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("private %s: %w", p, err)
		}
	}
	for _, p := range s.ReadWrite {
		p, optional := strings.CutPrefix(p, "-")
		if _, err := os.Stat(p); err != nil {
			if optional {
				continue
			}
			return fmt.Errorf("writable %s: %w", p, err)
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := remountRW(p); err != nil {
			return fmt.Errorf("writable %s: %w", p, err)
		}
	}
	return nil
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

func ld(off uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
}
func jeq(k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}
func jge(k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}
func jset(k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: jt, Jf: jf, K: k}
}
func and(k uint32) unix.SockFilter {
	return unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: k}
}
func ret(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }

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
