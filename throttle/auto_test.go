package throttle

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
)

func TestAutoChoosesAndSaysSo(t *testing.T) {
	testenv.RequireRoot(t)
	// The test covers the choice on a kernel with neither netem nor fq,
	// as on this project's machines (CI's included): the kernel's config
	// says which kernel this is, and without it nothing does.
	has, known := kernelHas("CONFIG_NET_SCH_NETEM")
	if !known {
		testenv.Missing(t, "no /proc/config.gz: cannot tell whether the kernel has netem")
	}
	// Not missing prerequisites: on a kernel with netem or fq, Auto
	// rightly takes another branch (TestNetemDelaysOrRefusesCleanly and
	// TestEDTDelaysOrRefusesCleanly cover those backends there). The skips hide no regression of Auto's probes: the
	// kernel's config, not a probe, says netem, and the fq skip needs the
	// config to confirm the probe (a probe that says fq on a kernel built
	// without it fails).
	if has {
		t.Skip("kernel has netem (its config says so): Auto chooses it; this test covers kernels without")
	}
	if ok, why := EDTAvailable(); ok {
		if fq, _ := kernelHas("CONFIG_NET_SCH_FQ"); !fq {
			t.Fatalf("the edt probe says fq (%s), the kernel's config says no fq", why)
		}
		t.Skip("kernel has fq (its config says so): Auto chooses edt; this test covers kernels without")
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	noEDT := func(Options, WriteOn) (Throttle, error) {
		t.Fatal("edt chosen on a kernel without fq")
		return nil, nil
	}
	// The registry's delay backends with fakes for edt and the delay line:
	// the probes, order and words are the real ones.
	cands := func(delayLine func(Options, WriteOn) (Throttle, error)) []Entry {
		cs := autoCandidates()
		for i := range cs {
			switch cs[i].Name {
			case "edt":
				cs[i].Build = noEDT
			case "delayline":
				cs[i].Build = delayLine
			}
		}
		return cs
	}
	o := Options{Device: "unused", Log: log}
	th, err := auto(cands(func(Options, WriteOn) (Throttle, error) { return NewMemory(), nil }), o, WriteOnReplies)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	if th.Name() != "dry-run" {
		t.Errorf("chose %s", th.Name())
	}
	if s := buf.String(); !strings.Contains(s, "backend=dry-run") || !strings.Contains(s, "none of edt, netem") || !strings.Contains(s, "edt not available") {
		t.Errorf("log does not say which backend and why: %q", s)
	}
	boom := errors.New("boom")
	if _, err := auto(cands(func(Options, WriteOn) (Throttle, error) { return nil, boom }), o, WriteOnReplies); !errors.Is(err, boom) {
		t.Errorf("delay line failure not reported: %v", err)
	}
}

// The registry is the one list: auto walks edt, netem, delayline in that
// order, the listing has every backend once, and New refuses what the
// list does not name.
func TestRegistryIsTheList(t *testing.T) {
	if got := strings.Join(DelayNames(), ","); got != "edt,netem,delayline" {
		t.Errorf("auto's order %s, want edt,netem,delayline", got)
	}
	if got := strings.Join(Names(), "|"); got != "auto|edt|netem|delayline|htb|delayline+htb|edt+htb|dry-run" {
		t.Errorf("names %s", got)
	}
	for _, r := range registry {
		if r.About == "" || r.Probe == nil || r.Build == nil || r.Needs == nil || r.Auto && r.AutoHas == "" {
			t.Errorf("%s: incomplete entry", r.Name)
		}
	}
	if _, err := New("tbf", Options{}); err == nil || !strings.Contains(err.Error(), "auto|edt|") {
		t.Errorf("unknown backend: %v", err)
	}
	if _, err := New("delayline", Options{WriteOn: "data"}); err == nil || !strings.Contains(err.Error(), "write_delay_on") {
		t.Errorf("bad write_delay_on: %v", err)
	}
	th, err := New("dry-run", Options{})
	if err != nil || th.Name() != "dry-run" {
		t.Errorf("dry-run: %v %v", th, err)
	}
}

// Auto's choice, made once for the agent and doctor: the first candidate
// whose probe passes, else the fallback (the last), also when a probe
// cannot tell.
func TestChoose(t *testing.T) {
	cands := []Entry{{Name: "a", AutoHas: "A"}, {Name: "b", AutoHas: "B"}, {Name: "z", AutoHas: "runs anywhere"}}
	boom := errors.New("no netns")
	for _, c := range []struct {
		name   string
		avail  map[string]bool
		err    error
		want   string
		probed bool
		why    string
	}{
		{"first", map[string]bool{"a": true, "b": true}, nil, "a", true, "ok a"},
		{"second", map[string]bool{"b": true}, nil, "b", true, "ok b"},
		{"none: the fallback", nil, nil, "z", false, "kernel runs none of a, b: z runs anywhere"},
		{"a probe cannot tell", map[string]bool{"b": true}, boom, "z", false, "auto's probes fail here"},
	} {
		got := choose(cands, func(e Entry) (bool, string, error) {
			if c.err != nil {
				return false, "", c.err
			}
			return c.avail[e.Name], cond(c.avail[e.Name], "ok "+e.Name, "no "+e.Name), nil
		})
		if got.Entry.Name != c.want || got.Probed != c.probed || !strings.HasPrefix(got.Why, c.why) || !errors.Is(got.Err, c.err) {
			t.Errorf("%s: %+v", c.name, got)
		}
	}
}
