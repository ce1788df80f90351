package doctor

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/guestenv"
	"github.com/sanqos/sanqos/internal/testenv"
)

// realConfigs are the configs the real-host tests run doctor with: none,
// and one per backend, each naming lo so the device-needing backends
// have one on any host (the guest has no NIC).
func realConfigs(t *testing.T) []string {
	paths := []string{""}
	for _, b := range []string{"auto", "delayline", "edt", "netem", "htb", "delayline+htb"} {
		p := filepath.Join(t.TempDir(), b+".yaml")
		cfg := fmt.Sprintf("backend: %s\ndevice: lo\nhttp: 127.0.0.1:0\nsocket: %s\n%s", b, filepath.Join(t.TempDir(), "agent.sock"), staticConfig)
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func runReal(t *testing.T, cfg string) Report {
	e := NewEnv(System(), cfg)
	rep := Run(e, Checks(e))
	for _, r := range rep.Results {
		t.Logf("%s %-12s %-4s %s", filepath.Base(cfg), r.Name, r.Status, r.Summary)
	}
	return rep
}

func result(t *testing.T, rep Report, name string) Result {
	for _, r := range rep.Results {
		if r.Name == name {
			return r.Result
		}
	}
	t.Fatalf("no %s check", name)
	return Result{}
}

// TestThisHost runs doctor on the machine and asserts what its kernel must
// give: on the lab's 6.18 (DESIGN.md, "Facts about the machines here") no
// netem and no fq, HTB, the NFQUEUE delay line through iptables-legacy,
// ipset, and auto taking the delay line; on Debian's stock kernel in the
// lab guest (lab/guest, TestDoctorInStockKernelGuest) every backend as a
// module, and auto taking edt.
func TestThisHost(t *testing.T) {
	testenv.RequireRoot(t)
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	release := strings.TrimSpace(string(rel))
	lab := strings.HasPrefix(release, "6.18.") && guestenv.Accel() == ""
	stock := guestenv.Accel() != ""
	if !lab && !stock {
		t.Skipf("the verdicts asserted are the lab kernel's (6.18) and the stock guest's; this is %s", release)
	}
	e := NewEnv(System(), realConfigs(t)[1]) // backend auto, device lo
	rep := Run(e, Checks(e))
	for _, r := range rep.Results {
		t.Logf("%-12s %-4s %s", r.Name, r.Status, r.Summary)
	}
	k := e.kernelFacts()
	type fact struct {
		key  string
		want bool
	}
	facts := []fact{{"htb", true}, {"nfqueue", true}, {"xt_NFQUEUE", true}, {"ipset", true}, {"xt_set", true}, {"cls_bpf", true}}
	wantBackend := "auto → edt"
	if lab {
		facts = append(facts, fact{"netem", false}, fact{"fq", false}, fact{"nft_queue", false})
		wantBackend = "auto → delayline"
		if v := e.iptFacts().variant; v != "legacy" {
			t.Errorf("iptables variant %q, want legacy (scripts/setup.sh sets it: this kernel has no nft queue)", v)
		}
	} else {
		facts = append(facts, fact{"netem", true}, fact{"fq", true})
	}
	for _, f := range facts {
		if k.has(f.key) != f.want {
			t.Errorf("kernel %s: %s (%s), want present=%v", f.key, k.state[f.key], k.note[f.key], f.want)
		}
	}
	if r := result(t, rep, "kernel"); r.Status != OK {
		t.Errorf("kernel check %s: %s", r.Status, r.Summary)
	}
	if r := result(t, rep, "backend"); r.Status != OK || !strings.HasPrefix(r.Summary, wantBackend) {
		t.Errorf("backend check %s %q, want ok and %q", r.Status, r.Summary, wantBackend)
	}
	if r := result(t, rep, "capabilities"); r.Status != OK {
		t.Errorf("capabilities as root: %s %q", r.Status, r.Summary)
	}
}

// snapshot is the kernel state doctor must leave as it found it, in this
// network namespace: namespaces, links, qdiscs, iptables and ip6tables
// rules, ipsets, nftables, bound queues, tables in use, loaded modules.
// Packet counters are cut, as traffic moves them.
func snapshot(t *testing.T) map[string]string {
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	out := map[string]string{}
	for _, c := range [][]string{
		{"ip", "netns", "list"}, {"ip", "-d", "link", "show"}, {"tc", "qdisc", "show"},
		{"iptables-save"}, {"ip6tables-save"}, {"ipset", "list", "-n"}, {"nft", "list", "ruleset"},
	} {
		if _, err := exec.LookPath(c[0]); err != nil {
			continue
		}
		b, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		s := counters.ReplaceAllString(string(b), "[]")
		if c[0] == "iptables-save" || c[0] == "ip6tables-save" {
			s = regexp.MustCompile(`(?m)^# .*$`).ReplaceAllString(s, "") // timestamps
		}
		out[strings.Join(c, " ")] = fmt.Sprintf("%s (err %v)", s, err)
	}
	for _, f := range []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names", "/proc/net/netfilter/nfnetlink_queue"} {
		b, err := os.ReadFile(f)
		out[f] = fmt.Sprintf("%s (err %v)", b, err)
	}
	// Modules by name only: their use counts move with traffic. Listing
	// ipsets or nft tables would load a module not loaded yet.
	b, _ := os.ReadFile("/proc/modules")
	var mods []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			mods = append(mods, f[0])
		}
	}
	slices.Sort(mods)
	out["/proc/modules"] = strings.Join(mods, " ")
	return out
}

// Doctor changes nothing: the host's state is the same before and after a
// run with every config, also where it would fail.
func TestChangesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "tc")
	before := snapshot(t)
	for _, cfg := range realConfigs(t) {
		runReal(t, cfg)
	}
	after := snapshot(t)
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if before[k] != after[k] {
			t.Errorf("%s changed:\nbefore:\n%s\nafter:\n%s", k, before[k], after[k])
		}
	}
}

// helperEnv marks the test binary's child that TestNoStateSyscalls traces.
const helperEnv = "SANQOS_DOCTOR_TRACED"

// TestTracedHelper is the traced child: doctor with every config.
func TestTracedHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestNoStateSyscalls under strace")
	}
	for _, cfg := range strings.Split(os.Getenv(helperEnv), ",") {
		runReal(t, cfg)
	}
}

// Doctor makes none of the system calls that create the state a
// before/after snapshot cannot see, because it is gone by the end:
// scratch namespaces (unshare, setns: throttle's probes use them), BPF
// objects, mounts, module loads; and runs only the programs that print.
func TestNoStateSyscalls(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "strace")
	cfgs := realConfigs(t)
	trace := filepath.Join(t.TempDir(), "strace.txt")
	cmd := exec.Command("strace", "-f", "-qq", "-e", "signal=none", "-o", trace,
		"-e", "trace=execve,unshare,setns,bpf,mount,init_module,finit_module",
		os.Args[0], "-test.run=^TestTracedHelper$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(cfgs, ","))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("traced doctor: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{filepath.Base(os.Args[0]), "iptables", "iptables-save", "ipset", "nft", "tgtadm"}
	execve := regexp.MustCompile(`execve\("([^"]+)"`)
	ran := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if m := execve.FindStringSubmatch(l); m != nil {
			ran[filepath.Base(m[1])]++
			if !slices.Contains(allowed, filepath.Base(m[1])) {
				t.Errorf("doctor ran %s: %s", m[1], l)
			}
			continue
		}
		// A thread that exits while strace reports it leaves a line such
		// as `202 ???( <detached ...>`: no system call of the filter's.
		if strings.Contains(l, "???( <detached ...>") {
			continue
		}
		t.Errorf("doctor made a state-creating system call: %s", l)
	}
	t.Logf("programs run over %d configs: %v", len(cfgs), ran)
}
