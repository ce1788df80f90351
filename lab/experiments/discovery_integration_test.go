package experiments

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// unmappedStatus is the part of the agent's status this test reads.
type unmappedStatus struct {
	Sources   []string `json:"discovery_sources"`
	Resources []struct {
		Name     string   `json:"name"`
		Devices  []string `json:"devices"`
		Unmapped string   `json:"unmapped"`
	} `json:"resources"`
}

// sanqosCmd runs the built sanqos (in the host's namespace: the tgtd
// control socket and the agent's are files) and returns its output and
// exit status.
func sanqosCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(lab.SanqosBinary, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sanqos %v: %v", args, err)
	}
	return string(out), 0
}

// doctorDiscovery is doctor's discovery check on cfg: its status and
// summary.
func doctorDiscovery(t *testing.T, cfg string) (string, string, int) {
	t.Helper()
	// stdout only: a failing doctor also says so on stderr.
	b, err := exec.Command(lab.SanqosBinary, "doctor", "--json", "--config", cfg).Output()
	out, code := string(b), 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Checks []struct{ Name, Status, Summary string } `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for _, c := range rep.Checks {
		if c.Name == "discovery" {
			return c.Status, c.Summary, code
		}
	}
	t.Fatalf("doctor has no discovery check:\n%s", out)
	return "", "", 0
}

// Each resource stands on its own, and a reload applies all of what it
// accepts or refuses it, on the lab's tgtd with discovery source auto
// (the default): beside a typo'd resource (vg9) the good one (vg1) is
// still protected — the autonomic agent, given only a 15 ms threshold,
// brings the reader's wait back under it while 12 writers run, slows
// the 3 writers and never the reader, and lifts every throttle after
// they stop (runHeldLoad; the lab's one run of it, each ~30 s) — and
// doctor fails the typo; a reload that adds vg1
// back (after one that removed it) maps it within one discovery refresh;
// a reload that empties the resources is refused, sanqos reload exits
// non-zero, and vg1 stays mapped. It needs one pool, so it runs on a lab
// that is up already (and leaves it up) or brings up its own.
func TestTypoAndReloadOnLabTgtd(t *testing.T) {
	requireLab(t)
	if _, err := lab.LoadState(); err != nil {
		upLab(t)
	}
	buildSanqos(t)
	lr, err := lab.NewRunner(context.Background(), "discovery-test", lab.RunOptions{Scale: 1, Results: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lr.Close() })
	r := wrap(lr, Options{RunOptions: lab.RunOptions{Scale: 1}})
	thr := 15 * time.Millisecond
	cfg := filepath.Join(r.Dir, "agent.yaml")
	if err := r.agentConfig(cfg, thr, true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The lab's discovery with source auto: it must find tgtd by itself.
	base := strings.Replace(string(b), "source: tgt", "source: auto", 1)
	write := func(resources string) {
		t.Helper()
		body := base[:strings.Index(base, "resources:")] + resources
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("resources:\n  - name: vg1\n")
	if st, sum, _ := doctorDiscovery(t, cfg); st != "ok" {
		t.Errorf("doctor on the good config: discovery %s: %s", st, sum)
	}
	write("resources:\n  - name: vg1\n  - name: vg9\n")
	st, sum, code := doctorDiscovery(t, cfg)
	if st != "fail" || code == 0 || !strings.Contains(sum, "resource vg9 maps to nothing: no discovered pool matches") {
		t.Errorf("doctor on the typo: exit %d, discovery %s: %s", code, st, sum)
	}
	t.Logf("doctor on the typo: exit %d: %s", code, sum)

	a, err := lab.StartAgent("delayline", r.Dir, "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	h := runHeldLoad(t, r, a, "typo", "agent on beside vg9", "agent beside a typo'd resource", thr)
	if len(h.during) != 3 {
		t.Errorf("throttled %d consumers under load beside the typo, want the 3 writers (b3..b5)", len(h.during))
	}
	status := func() map[string][2]string {
		t.Helper()
		var s unmappedStatus
		if err := a.Status(&s); err != nil {
			t.Fatal(err)
		}
		m := map[string][2]string{}
		for _, res := range s.Resources {
			m[res.Name] = [2]string{strings.Join(res.Devices, ","), res.Unmapped}
		}
		if len(s.Sources) != 1 || s.Sources[0] != "tgt" {
			t.Errorf("discovery sources %v, want auto to have found [tgt]", s.Sources)
		}
		return m
	}
	m := status()
	if m["vg1"][0] == "" || m["vg1"][1] != "" || !strings.Contains(m["vg9"][1], "no discovered pool matches") {
		t.Errorf("status beside the typo: %v", m)
	}

	// A reload that removes vg1, then one that adds it back: mapped
	// within one discovery refresh (the reload runs a round itself
	// before the swap).
	write("resources:\n  - name: vg9\n")
	if out, code := sanqosCmd(t, "reload", "--socket", a.Socket); code != 0 {
		t.Fatalf("reload removing vg1: exit %d\n%s", code, out)
	}
	write("resources:\n  - name: vg9\n  - name: vg1\n")
	start := time.Now()
	out, code := sanqosCmd(t, "reload", "--socket", a.Socket)
	if code != 0 || !strings.Contains(out, "config reloaded: 2 resources") || !strings.Contains(out, "UNMAPPED vg9") {
		t.Errorf("reload adding vg1: exit %d\n%s", code, out)
	}
	if err := lab.WaitFor("vg1 mapped", 10*time.Second, func() bool { m := status(); return m["vg1"][0] != "" && m["vg1"][1] == "" }); err != nil {
		t.Errorf("vg1 not mapped within a discovery refresh (10s) of the reload: %v", status())
	}
	t.Logf("reload adding vg1: verdict and vg1 mapped %v after sanqos reload began; %v", time.Since(start).Round(time.Millisecond), status())

	// A reload emptying the resources: refused, sanqos reload says why
	// and exits non-zero, and both pools stay protected.
	write("resources: []\n")
	out, code = sanqosCmd(t, "reload", "--socket", a.Socket)
	if code == 0 || !strings.Contains(out, "lists no resources") {
		t.Errorf("reload emptying the resources: exit %d\n%s", code, out)
	}
	if m := status(); m["vg1"][0] == "" || m["vg1"][1] != "" {
		t.Errorf("after the refused reload: %v", m)
	}
	t.Logf("reload emptying the resources: exit %d: %s", code, strings.TrimSpace(out))
}
