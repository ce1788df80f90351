package doctor

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/throttle"
)

// testBackend is the test-only backend's throttle: records, touches
// nothing.
type testBackend struct{ *throttle.Memory }

func (testBackend) Name() string { return "testonly" }

// A backend is one file and one throttle.Register: registered from this
// test alone, it is seen by config validation (its name, its caps),
// auto's choice (first in rank where its probe passes), doctor (which
// predicts it from its Probes and Needs on the stock kernel, and lists
// the kernel feature only it names) and cleanup (its label suffix), with
// nothing else told of it.
func TestRegisteredBackendIsSeenEverywhere(t *testing.T) {
	htb := throttle.Feature{Key: "htb", What: "htb qdisc", Symbol: "CONFIG_NET_SCH_HTB", Module: "sch_htb"}
	ifb := throttle.Feature{Key: "ifb", What: "ingress shaping device", Symbol: "CONFIG_IFB", Module: "ifb"}
	cake := throttle.Feature{Key: "cake", What: "cake qdisc", Symbol: "CONFIG_NET_SCH_CAKE", Module: "sch_cake"}
	var cleaned []string
	remove := throttle.Register(throttle.Entry{Name: "testonly", Rank: 1, Auto: true, AutoHas: "htb",
		About: "a test's backend", Caps: throttle.Caps{Delay: true, WriteRate: true}, Parts: throttle.PartDevice,
		Needs:   func(throttle.WriteOn) [][]throttle.Feature { return [][]throttle.Feature{{htb}, {ifb, cake}} },
		Probes:  [][]throttle.Feature{{htb}},
		Objects: []throttle.Objects{{Suffix: "-to", Cleanup: func(label string) error { cleaned = append(cleaned, label); return nil }}},
		Probe:   func() (bool, string, error) { return true, "the test says so", nil },
		Build: func(throttle.Options, throttle.WriteOn) (throttle.Throttle, error) {
			return testBackend{throttle.NewMemory()}, nil
		}})
	t.Cleanup(remove)

	const res = "resources:\n  - name: vg1\n    devices: [sdb]\n"
	if _, err := config.Parse([]byte("backend: testonly\nrate_lever_steps: 4\n" + res)); err != nil {
		t.Errorf("config: %v", err)
	}
	if _, err := config.Parse([]byte("backend: netem\nrate_lever_steps: 4\n" + res)); err == nil || !strings.Contains(err.Error(), "(testonly, delayline+htb, edt+htb, dry-run)") {
		t.Errorf("config: rate_lever_steps on netem: %v", err)
	}

	th, err := throttle.New("auto", throttle.Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil || th.Name() != "testonly" {
		t.Fatalf("auto built %v, %v", th, err)
	}
	if !slices.Contains(throttle.DelayNames(), "testonly") {
		t.Errorf("the lab's delay backends %v", throttle.DelayNames())
	}

	e := fixture{base: "stock-6.1"}.env(t)
	r := e.backendCheck()
	if r.Status != OK || !strings.HasPrefix(r.Summary, "auto → testonly: kernel has htb") ||
		!slices.Contains(r.Detail, "testonly needs: htb module, ifb module | cake no") ||
		!slices.ContainsFunc(r.Detail, func(s string) bool { return strings.HasPrefix(s, "testonly throttles IPv4 consumers only") }) {
		t.Errorf("doctor: %s %q %q", r.Status, r.Summary, r.Detail)
	}

	if r := e.kernelCheck(); !slices.ContainsFunc(r.Detail, func(s string) bool {
		return strings.HasPrefix(s, "cake ") && strings.HasSuffix(s, "cake qdisc (testonly) — CONFIG_NET_SCH_CAKE is not set")
	}) {
		t.Errorf("doctor's kernel check does not list the test backend's feature: %q", r.Detail)
	}

	if err := throttle.Cleanup("lbl"); err != nil {
		t.Logf("the real backends' cleanup (not root here?): %v", err)
	}
	if !slices.Equal(cleaned, []string{"lbl-to"}) || !slices.Contains(throttle.Suffixes(), "-to") {
		t.Errorf("cleanup ran %q, suffixes %q", cleaned, throttle.Suffixes())
	}
}
