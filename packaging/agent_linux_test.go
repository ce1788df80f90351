package packaging

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
)

// The scratch namespace's interfaces: the agent throttles on sqp0
// towards the consumer on sqp1.
const (
	nsDev      = "sqp0"
	nsPeer     = "sqp1"
	nsAddr     = "10.213.0.1"
	nsConsumer = "10.213.0.2"
)

// scratchNS creates a network namespace with a veth pair (addresses, up),
// deleted at cleanup, so the agent's rules, sets, qdiscs and queue never
// touch the host's (nor a lab experiment's).
func scratchNS(t testing.TB) string {
	t.Helper()
	return testenv.ScratchNS(t, "sqpkg", testenv.Veth{Dev: nsDev, Addr: nsAddr, Peer: nsPeer, PeerAddr: nsConsumer})
}

// inNS runs argv in ns with every privilege (not in the sandbox).
func inNS(t testing.TB, ns string, argv ...string) string {
	t.Helper()
	return testenv.Run(t, append([]string{"ip", "netns", "exec", ns}, argv...)...)
}

// leftovers lists what of an agent is left in ns: rules, sets, qdiscs
// other than the veths' default, links other than the namespace's own.
func leftovers(t testing.TB, ns string) []string {
	t.Helper()
	var out []string
	for _, c := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"ipset", "list", "-n"}} {
		if _, err := exec.LookPath(c[0]); err != nil {
			continue
		}
		for _, l := range strings.Split(inNS(t, ns, c...), "\n") {
			if strings.Contains(l, "sanqos") {
				out = append(out, c[0]+": "+l)
			}
		}
	}
	for _, l := range strings.Split(testenv.Run(t, "tc", "-n", ns, "qdisc", "show"), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) < 5 || f[1] == "noqueue":
		case f[1] == "clsact" && emptyClsact(t, ns, f[4]):
			// The BPF backends remove their filters but leave the hook,
			// which other software may share: inert without filters.
			t.Logf("left, without filters: %s", l)
		default:
			out = append(out, "qdisc: "+l)
		}
	}
	for _, l := range strings.Split(testenv.Run(t, "ip", "-n", ns, "-o", "link", "show"), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if name != "lo" && name != nsDev && name != nsPeer {
				out = append(out, "link: "+name)
			}
		}
	}
	return out
}

// emptyClsact reports whether dev's clsact hooks hold no filter.
func emptyClsact(t testing.TB, ns, dev string) bool {
	t.Helper()
	return strings.TrimSpace(testenv.Run(t, "tc", "-n", ns, "filter", "show", "dev", dev, "ingress")+
		testenv.Run(t, "tc", "-n", ns, "filter", "show", "dev", dev, "egress")) == ""
}

// backend is one row of `sanqos throttle backends --json`.
type backend struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Why       string `json:"why"`
	Auto      bool   `json:"auto"`
}

func parseBackends(t testing.TB, out []byte) []backend {
	t.Helper()
	var bs []backend
	if err := json.Unmarshal(out, &bs); err != nil {
		t.Fatalf("throttle backends --json: %v\n%s", err, out)
	}
	return bs
}

// execStart is the unit's ExecStart with the binary and config replaced.
func execStart(t testing.TB, u *unit, bin, cfg string) []string {
	t.Helper()
	argv := strings.Fields(u.last("Service", "ExecStart"))
	if len(argv) == 0 || argv[0] != "@BINDIR@/sanqos" {
		t.Fatalf("ExecStart %q: want @BINDIR@/sanqos ...", u.last("Service", "ExecStart"))
	}
	argv[0] = bin
	for i, a := range argv {
		if a == "/etc/sanqos/sanqos.yaml" {
			argv[i] = cfg
		}
	}
	return argv
}

// execReload is the unit's ExecReload with bin for @BINDIR@/sanqos.
func execReload(t testing.TB, u *unit, bin string) []string {
	t.Helper()
	argv := strings.Fields(u.last("Service", "ExecReload"))
	if len(argv) == 0 || argv[0] != "@BINDIR@/sanqos" {
		t.Fatalf("ExecReload %q: want @BINDIR@/sanqos ...", u.last("Service", "ExecReload"))
	}
	argv[0] = bin
	return argv
}

// execStartPre runs the unit's ExecStartPre lines as systemd would: all
// are '+' (outside the sandbox), '-' ones may fail.
func execStartPre(t testing.TB, u *unit) {
	t.Helper()
	for _, l := range u.all("Service", "ExecStartPre") {
		prefix := l[:strings.IndexFunc(l, func(r rune) bool { return !strings.ContainsRune("-+@:!", r) })]
		if !strings.Contains(prefix, "+") {
			t.Fatalf("ExecStartPre=%s: the test runs only '+' lines (outside the sandbox)", l)
		}
		argv := strings.Fields(strings.TrimPrefix(l, prefix))
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil && !strings.Contains(prefix, "-") {
			t.Fatalf("ExecStartPre=%s: %v\n%s", l, err, out)
		}
	}
}

// stopTimeout is the unit's TimeoutStopSec.
func stopTimeout(t testing.TB, u *unit) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(u.last("Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	return d
}

// targetConfig is a target-mode config with backend b: one static
// resource without consumers, so no controller touches the consumer the
// test throttles by hand; no HTTP listener.
func targetConfig(b, sock, dev string) string {
	return fmt.Sprintf("backend: %s\ndevice: %s\nsocket: %s\nhttp: \"\"\ndiscovery:\n  source: static\nresources:\n  - name: r1\n    devices: [%s]\n", b, nsDev, sock, dev)
}

// throttleArgs are a `throttle set` for the consumer that exercises what
// backend b does.
func throttleArgs(b string) []string {
	switch b {
	case "htb":
		return []string{"--rate", "10MiB/s"}
	case "delayline+htb":
		return []string{"--read-delay", "2ms", "--write-rate", "2MiB/s"}
	default:
		return []string{"--read-delay", "2ms"}
	}
}

// doctorCaps is what `sanqos doctor --json` says of the capabilities.
func doctorCaps(t testing.TB, out []byte) (status, summary string) {
	t.Helper()
	var rep struct {
		Checks []struct{ Name, Status, Summary string }
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for _, c := range rep.Checks {
		if c.Name == "capabilities" {
			return c.Status, c.Summary
		}
	}
	t.Fatalf("doctor --json has no capabilities check:\n%s", out)
	return "", ""
}

// The hardening does not kill the agent: under the unit's sandbox
// (sandbox_linux_test.go), as shipped and with its documented drop-in for
// a named backend, in a scratch network namespace:
//
//   - as shipped, `sanqos throttle backends` finds every backend it finds
//     with every privilege, and picks the same for auto (its probes run);
//   - for every backend this kernel has (and auto as shipped), doctor finds
//     the capabilities enough, and the agent started as ExecStart starts
//     it holds the unit's capabilities and filters, throttles a consumer,
//     keeps its marks past their TTL, logs no error, reloads on SIGHUP
//     and on ExecReload (sanqos reload, in the sandbox), and on SIGTERM (KillSignal) ends with status 0 within
//     TimeoutStopSec leaving no rule, set, qdisc or link behind;
//   - as shipped, the agent runs in bridge mode (its AF_PACKET capture);
//   - a SIGHUP or SIGTERM while the agent starts neither kills it nor
//     leaves anything behind.
//
// It is long because its subtests share what is built once for all of
// them: the binary, the unit with its drop-in, the scratch namespace and
// the backends' probe; each subtest is one backend's or one signal's run.
func TestAgentUnderUnit(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "systemd-analyze", "ip", "tc", "iptables-save", "ipset")
	bin := sanqos(t)
	shipped, text := readUnit(t)
	named, _ := readUnit(t)
	if err := named.add(dropIn(t, text)); err != nil {
		t.Fatal(err)
	}
	execStartPre(t, shipped)
	ns := scratchNS(t)
	all := parseBackends(t, []byte(inNS(t, ns, bin, "throttle", "backends", "--json")))
	var names []string
	autoPick := ""
	for _, b := range all {
		if b.Available && b.Name != "dry-run" {
			names = append(names, b.Name)
		}
		if b.Auto {
			autoPick = b.Name
		}
	}
	t.Logf("this kernel runs %v; auto takes %s", names, autoPick)
	dev := testenv.BlockDevice(t)
	timeout := stopTimeout(t, shipped)

	for _, v := range []struct {
		name  string
		u     *unit
		probe bool // auto's probes may run: scratch namespaces allowed
	}{{"shipped", shipped, true}, {"named-backend drop-in", named, false}} {
		t.Run(v.name, func(t *testing.T) {
			dir := sandboxDir(t)
			rw := filepath.Join(dir, "run")
			sock := filepath.Join(rw, "sanqos.sock")
			sandboxed := func(argv ...string) *exec.Cmd { return newSandbox(t, v.u, rw, argv).command(t, ns) }
			if v.probe {
				out, err := sandboxed(bin, "throttle", "backends", "--json").Output()
				if err != nil {
					t.Fatalf("throttle backends in the sandbox: %v", err)
				}
				in := parseBackends(t, out)
				for i, b := range all {
					if i >= len(in) || in[i].Name != b.Name || in[i].Available != b.Available || in[i].Auto != b.Auto {
						t.Errorf("in the sandbox %+v, with every privilege %+v", in[i], b)
					}
				}
			}
			backends := names
			if v.probe {
				backends = append([]string{"auto"}, names...)
			}
			for _, b := range backends {
				t.Run(b, func(t *testing.T) {
					cfg := filepath.Join(dir, "sanqos.yaml")
					if err := os.WriteFile(cfg, []byte(targetConfig(b, sock, dev)), 0o644); err != nil {
						t.Fatal(err)
					}
					if l := leftovers(t, ns); len(l) > 0 {
						t.Fatalf("before the agent: %v", l)
					}
					out, _ := sandboxed(bin, "doctor", "--json", "--config", cfg).Output()
					if st, sum := doctorCaps(t, out); st != "ok" {
						t.Errorf("doctor in the sandbox: capabilities %s: %s", st, sum)
					}
					a := startAgent(t, sandboxed(execStart(t, v.u, bin, cfg)...))
					a.waitLog(t, "agent running", 30*time.Second)
					used := b
					if b == "auto" {
						used, _ = a.waitLog(t, "throttle backend chosen", time.Second)["backend"].(string)
						if used != autoPick {
							t.Errorf("auto took %s in the sandbox, %s with every privilege", used, autoPick)
						}
					}
					checkSandboxed(t, v.u, a)
					args := append([]string{"throttle", "set", nsConsumer, "--socket", sock}, throttleArgs(used)...)
					if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
						t.Fatalf("%v: %v\n%s\nagent:\n%s", args, err, out, a.log())
					}
					// Past the marks' and heartbeats' TTL (1 s): their leases run.
					time.Sleep(1500 * time.Millisecond)
					a.alive(t, "throttle set")
					if out := testenv.Run(t, bin, "throttle", "list", "--socket", sock); !strings.Contains(out, nsConsumer) {
						t.Errorf("throttle list:\n%s", out)
					}
					if used != "edt" {
						if out := inNS(t, ns, "ipset", "list"); !strings.Contains(out, nsConsumer) {
							t.Errorf("the consumer's set entry is gone after 1.5 s (lease):\n%s\nagent:\n%s", out, a.log())
						}
					}
					if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
						t.Fatal(err)
					}
					a.waitLog(t, "config reloaded", 10*time.Second)
					a.alive(t, "SIGHUP")
					// ExecReload, in the sandbox: the agent's verdict, over
					// the control socket.
					if out, err := sandboxed(append(execReload(t, v.u, bin), "--socket", sock)...).CombinedOutput(); err != nil || !strings.Contains(string(out), "config reloaded") {
						t.Errorf("ExecReload: %v\n%s\nagent:\n%s", err, out, a.log())
					}
					if err := a.stop(t, syscall.SIGTERM, timeout); err != nil {
						t.Errorf("after SIGTERM: %v\n%s", err, a.log())
					}
					a.waitLog(t, "agent stopping: removing throttles", 0)
					if e := a.errors(); len(e) > 0 {
						t.Errorf("agent logged errors:\n%s", strings.Join(e, "\n"))
					}
					if l := leftovers(t, ns); len(l) > 0 {
						t.Errorf("after SIGTERM: %v", l)
					}
				})
			}
			if !v.probe {
				return
			}
			t.Run("bridge mode", func(t *testing.T) {
				cfg := filepath.Join(dir, "sanqos.yaml")
				c := fmt.Sprintf("mode: bridge\ncapture_interface: %s\nbackend: delayline\nsocket: %s\nhttp: \"\"\nresources:\n  - name: p\n    portals: [\"%s:3260\"]\n", nsPeer, sock, nsAddr)
				if err := os.WriteFile(cfg, []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
				a := startAgent(t, sandboxed(execStart(t, v.u, bin, cfg)...))
				a.waitLog(t, "agent running", 30*time.Second)
				checkSandboxed(t, v.u, a)
				time.Sleep(500 * time.Millisecond)
				a.alive(t, "start")
				if err := a.stop(t, syscall.SIGTERM, timeout); err != nil {
					t.Errorf("after SIGTERM: %v\n%s", err, a.log())
				}
				if e := a.errors(); len(e) > 0 {
					t.Errorf("agent logged errors:\n%s", strings.Join(e, "\n"))
				}
				if l := leftovers(t, ns); len(l) > 0 {
					t.Errorf("after SIGTERM: %v", l)
				}
			})
			// A config without resources makes the agent log a warning
			// right after reading it, before it builds its backend: the
			// signal then lands in its start.
			early := filepath.Join(dir, "early.yaml")
			if err := os.WriteFile(early, []byte(fmt.Sprintf("backend: auto\ndevice: %s\nsocket: %s\nhttp: \"\"\ndiscovery:\n  source: static\n", nsDev, sock)), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Run("SIGHUP while starting", func(t *testing.T) {
				a := startAgent(t, sandboxed(execStart(t, v.u, bin, early)...))
				a.waitLog(t, "config", 30*time.Second)
				if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
				a.waitLog(t, "agent running", 30*time.Second)
				// Answered once it runs: refused, since the file lists no
				// resources (a reload must not leave nothing protected).
				a.waitLog(t, "config reload rejected; the old config stays active", 10*time.Second)
				a.alive(t, "SIGHUP")
				if err := a.stop(t, syscall.SIGTERM, timeout); err != nil {
					t.Errorf("after SIGTERM: %v\n%s", err, a.log())
				}
			})
			t.Run("SIGTERM while starting", func(t *testing.T) {
				a := startAgent(t, sandboxed(execStart(t, v.u, bin, early)...))
				a.waitLog(t, "config", 30*time.Second)
				if err := a.stop(t, syscall.SIGTERM, timeout); err != nil {
					t.Errorf("SIGTERM while starting: %v\n%s", err, a.log())
				}
				if l := leftovers(t, ns); len(l) > 0 {
					t.Errorf("after SIGTERM while starting: %v", l)
				}
			})
		})
	}
}

// checkSandboxed fails t unless the agent runs with exactly the unit's
// capabilities, no_new_privs and seccomp filters.
func checkSandboxed(t testing.TB, u *unit, a *agentProc) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	st := parseStatus(string(b))
	want, err := capMask(u.list("Service", "CapabilityBoundingSet"))
	if err != nil {
		t.Fatal(err)
	}
	if st["Name"] != "sanqos" || st["CapEff"] != fmt.Sprintf("%016x", want) || st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
		t.Errorf("agent process: Name %s CapEff %s NoNewPrivs %s Seccomp %s; want sanqos, %016x, 1, 2",
			st["Name"], st["CapEff"], st["NoNewPrivs"], st["Seccomp"], want)
	}
}
