package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
)

// unitFile is the unit as the repository ships it (@BINDIR@ unsubstituted).
const unitFile = "sanqos.service"

// directive is one Key=Value line of a unit.
type directive struct {
	section, key, value string
	line                int
}

// unit is a parsed unit file, with any drop-ins applied after it, in order.
type unit struct{ dirs []directive }

// parseUnit reads systemd's unit syntax: [Section], Key=Value, comments
// with # or ;. Continuation lines are not used by our unit and refused.
func parseUnit(text string) (*unit, error) {
	u := &unit{}
	return u, u.add(text)
}

func (u *unit) add(text string) error {
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case strings.HasSuffix(l, "\\"):
			return &parseError{n, "continuation lines are not supported by this parser"}
		case l[0] == '[' && l[len(l)-1] == ']':
			section = l[1 : len(l)-1]
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				return &parseError{n, "want Key=Value in a section: " + l}
			}
			u.dirs = append(u.dirs, directive{section, strings.TrimSpace(k), strings.TrimSpace(v), n})
		}
	}
	return sc.Err()
}

type parseError struct {
	line int
	msg  string
}

func (e *parseError) Error() string { return "line " + strconv.Itoa(e.line) + ": " + e.msg }

// last is the value of the last assignment of key ("" if none).
func (u *unit) last(section, key string) string {
	v := ""
	for _, d := range u.dirs {
		if d.section == section && d.key == key {
			v = d.value
		}
	}
	return v
}

// list is a list-valued key as systemd accumulates it: each assignment
// adds its space-separated words, an empty one resets the list.
func (u *unit) list(section, key string) []string {
	var out []string
	for _, d := range u.dirs {
		if d.section == section && d.key == key {
			if d.value == "" {
				out = nil
				continue
			}
			out = append(out, strings.Fields(d.value)...)
		}
	}
	return out
}

// all are the values of every assignment of key, in order.
func (u *unit) all(section, key string) []string {
	var out []string
	for _, d := range u.dirs {
		if d.section == section && d.key == key {
			out = append(out, d.value)
		}
	}
	return out
}

// readUnit parses the shipped unit.
func readUnit(t testing.TB) (*unit, string) {
	t.Helper()
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(string(b))
	if err != nil {
		t.Fatalf("%s: %v", unitFile, err)
	}
	return u, string(b)
}

// dropIn is the drop-in the unit's header comment documents for a config
// that names its backend: the indented lines after "#   [Service]".
func dropIn(t testing.TB, text string) string {
	t.Helper()
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.TrimSpace(l) == "#   [Service]":
			in = true
			out = append(out, "[Service]")
		case in && strings.HasPrefix(l, "#   "):
			out = append(out, strings.TrimPrefix(l, "#   "))
		case in:
			return strings.Join(out, "\n") + "\n"
		}
	}
	t.Fatalf("%s: no drop-in (#   [Service] ...) in the header comment", unitFile)
	return ""
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// sanqos builds the agent once per test binary, into a directory that the
// unit's sandbox can see (not /tmp, which PrivateTmp hides; /run as root),
// removed by TestMain.
func sanqos(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		parent := ""
		if os.Geteuid() == 0 {
			parent = "/run"
		}
		if buildDir, buildErr = os.MkdirTemp(parent, "sanqos-packaging-"); buildErr != nil {
			return
		}
		// 0755: the directory is the sandbox's view of the binary and config.
		if buildErr = os.Chmod(buildDir, 0o755); buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, "sanqos"), "github.com/sanqos/sanqos/cmd/sanqos").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err, string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("build sanqos: %v", buildErr)
	}
	return filepath.Join(buildDir, "sanqos")
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// installedUnit is the unit as `make install` writes it (its sed), with
// the binary directory bin and any drop-in appended, in dir/sanqos.service.
func installedUnit(t testing.TB, dir, bin, extra string) string {
	t.Helper()
	_, text := readUnit(t)
	p := filepath.Join(dir, unitFile)
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(text, "@BINDIR@", bin)+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// systemd-analyze verify accepts the unit as installed, without a word:
// any warning (an unknown or misplaced directive, a bad value, a missing
// executable) fails the test. The documented drop-in is checked with it.
func TestUnitVerifies(t *testing.T) {
	testenv.RequireCommands(t, "systemd-analyze")
	bin := filepath.Dir(sanqos(t))
	_, text := readUnit(t)
	for _, tc := range []struct{ name, extra string }{
		{"as shipped", ""},
		{"with the named-backend drop-in", "\n" + dropIn(t, text)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := installedUnit(t, t.TempDir(), bin, tc.extra)
			cmd := exec.Command("systemd-analyze", "verify", "--man=no", p)
			out, err := cmd.CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", p, err, out)
			}
		})
	}
}

// The unit's documented drop-in parses, and changes only what it says:
// the capabilities (without CAP_SYS_ADMIN) and the namespaces.
func TestUnitDropIn(t *testing.T) {
	u, text := readUnit(t)
	if err := u.add(dropIn(t, text)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(u.list("Service", "CapabilityBoundingSet"), " "); got != "CAP_NET_ADMIN CAP_NET_RAW CAP_BPF" {
		t.Errorf("drop-in's capabilities %q", got)
	}
	if got := u.last("Service", "RestrictNamespaces"); got != "yes" {
		t.Errorf("drop-in's RestrictNamespaces %q", got)
	}
}

// doctor's fixture of a process under the unit (doctor/testdata/status/unit)
// holds exactly the unit's capabilities, so doctor's tests of "the unit"
// test this unit.
func TestDoctorFixtureIsTheUnit(t *testing.T) {
	u, _ := readUnit(t)
	want, err := capMask(u.list("Service", "CapabilityBoundingSet"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../doctor/testdata/status/unit")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		if k == "CapEff" || k == "CapBnd" || k == "CapPrm" {
			got, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil || got != want {
				t.Errorf("doctor/testdata/status/unit %s %s, the unit's set is %016x", k, strings.TrimSpace(v), want)
			}
		}
	}
}

// capNumbers are the capabilities the unit may name (linux/capability.h).
var capNumbers = map[string]uint{
	"CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_KILL": 5, "CAP_NET_BIND_SERVICE": 10,
	"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_SYS_MODULE": 16, "CAP_SYS_ADMIN": 21,
	"CAP_SYS_RESOURCE": 24, "CAP_PERFMON": 38, "CAP_BPF": 39,
}

func capMask(names []string) (uint64, error) {
	var m uint64
	for _, n := range names {
		c, ok := capNumbers[n]
		if !ok {
			return 0, &parseError{0, "capability " + n + " not in capNumbers: add it"}
		}
		m |= 1 << c
	}
	return m, nil
}

// The unit starts, reloads and stops the agent the way the agent expects:
// `sanqos reload` asks the agent to reload and waits for its verdict, so
// systemctl reload fails when the agent refuses the file (SIGHUP, which
// the agent catches from its start, only logs it), SIGTERM to the agent alone (not to an iptables it waits for)
// stops it cleanly, with time for the delay line's drain (at most 3 s)
// and the removals, and a crash restarts it.
func TestUnitProcess(t *testing.T) {
	u, _ := readUnit(t)
	for k, want := range map[string]string{
		"Type": "simple", "ExecReload": "@BINDIR@/sanqos reload", "KillSignal": "SIGTERM", "KillMode": "mixed",
		"Restart": "on-failure", "User": "root",
	} {
		if got := u.last("Service", k); got != want {
			t.Errorf("%s=%s, want %s", k, got, want)
		}
	}
	d, err := time.ParseDuration(u.last("Service", "TimeoutStopSec"))
	if err != nil || d < 10*time.Second {
		t.Errorf("TimeoutStopSec=%s: want a duration of at least 10s (the delay line drains for up to 3 s)", u.last("Service", "TimeoutStopSec"))
	}
	if got := u.last("Service", "ExecStart"); !strings.HasPrefix(got, "@BINDIR@/sanqos agent --config /etc/sanqos/sanqos.yaml") {
		t.Errorf("ExecStart=%s", got)
	}
}
