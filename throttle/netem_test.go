package throttle

import (
	"bufio"
	"compress/gzip"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sanqos/sanqos/internal/testenv"
)

func TestNetemPlan(t *testing.T) {
	cfg := NetemConfig{tcConfig: tcConfig{Device: "eth9", Label: "sanqos"}}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	if cfg.steps() != 40 {
		t.Fatalf("steps %d, want 40 (20 ms / 0.5 ms)", cfg.steps())
	}
	p := cfg.plan(7)
	major := tcRootMajor("sanqos")
	if p.Root.Handle != netlink.MakeHandle(major, 0) || p.Root.Parent != netlink.HANDLE_ROOT || p.Root.Defcls != 1 || p.Root.LinkIndex != 7 {
		t.Errorf("root %+v", p.Root)
	}
	if len(p.Classes) != 41 || len(p.Leaves) != 40 {
		t.Fatalf("%d classes, %d leaves", len(p.Classes), len(p.Leaves))
	}
	if c := p.Classes[0]; c.Handle != netlink.MakeHandle(major, 1) || c.Parent != netlink.MakeHandle(major, 0) {
		t.Errorf("default class %+v", c)
	}
	for s := 1; s <= 40; s++ {
		c, q := p.Classes[s], p.Leaves[s-1]
		if c.Handle != netlink.MakeHandle(major, uint16(s+1)) || c.Parent != netlink.MakeHandle(major, 0) {
			t.Errorf("step %d class %s parent %s", s, tcHandleString(c.Handle), tcHandleString(c.Parent))
		}
		// Classes never shape: rate and ceil are MaxRate (bytes/s).
		if c.Rate != MaxRate || c.Ceil != MaxRate {
			t.Errorf("step %d class rate %d ceil %d", s, c.Rate, c.Ceil)
		}
		if q.Parent != c.Handle || q.Handle != netlink.MakeHandle(0x5200+uint16(s), 0) || q.Limit != 100000 {
			t.Errorf("step %d leaf %+v", s, q.QdiscAttrs)
		}
		// netlink.NewNetem stores the latency in psched ticks.
		want := netlink.NewNetem(netlink.QdiscAttrs{}, netlink.NetemQdiscAttrs{Latency: uint32(s) * 500}).Latency
		if q.Latency != want || q.Jitter != 0 || q.Loss != 0 {
			t.Errorf("step %d latency %d ticks, want %d", s, q.Latency, want)
		}
		if got := p.Marks.classID(uint32(s)); got != c.Handle {
			t.Errorf("step %d mark field maps to %s", s, tcHandleString(got))
		}
	}
	if p.Marks.mark(1) != 0x10000 || p.Marks.mark(40) != 0x280000 {
		t.Errorf("marks %#x %#x", p.Marks.mark(1), p.Marks.mark(40))
	}
}

func TestNetemStepRoundsUp(t *testing.T) {
	cfg := NetemConfig{tcConfig: tcConfig{Device: "x"}}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d    time.Duration
		step int
		ok   bool
	}{
		{0, 0, true}, {1, 1, true}, {500 * time.Microsecond, 1, true}, {501 * time.Microsecond, 2, true},
		{4600 * time.Microsecond, 10, true}, {20 * time.Millisecond, 40, true}, {20*time.Millisecond + 1, 0, false},
	} {
		s, err := cfg.stepOf(tc.d)
		if s != tc.step || (err == nil) != tc.ok {
			t.Errorf("stepOf(%v) = %d, %v; want %d ok=%v", tc.d, s, err, tc.step, tc.ok)
		}
	}
}

func TestNetemConfigRejects(t *testing.T) {
	x := tcConfig{Device: "x"}
	for name, c := range map[string]NetemConfig{
		"no device":      {},
		"bad label":      {tcConfig: tcConfig{Device: "x", Label: "no spaces"}},
		"too many steps": {tcConfig: x, Step: time.Microsecond, MaxDelay: 50 * time.Millisecond},
		"max ≥ MaxDelay": {tcConfig: x, MaxDelay: MaxDelay},
		"narrow mask":    {tcConfig: x, MarkMask: 0xf},
		"holey mask":     {tcConfig: x, MarkMask: 0xf0f},
	} {
		if err := c.defaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Set refuses what it cannot do before touching the kernel, so these run
// without root on an unbuilt backend.
func TestNetemSetRejectsBeforeKernel(t *testing.T) {
	n := &Netem{cfg: NetemConfig{tcConfig: tcConfig{Device: "x"}}, cur: map[netip.Addr]netemState{}}
	if err := n.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("10.0.0.2")
	for name, s := range map[netip.Addr]Setting{
		a:                              {Rate: 1000},
		netip.MustParseAddr("fd00::2"): {ReadDelay: time.Millisecond},
	} {
		if err := n.Set(map[netip.Addr]Setting{name: s}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v %+v: %v, want ErrUnsupported", name, s, err)
		}
	}
	if err := n.Set(map[netip.Addr]Setting{a: {WriteDelay: 25 * time.Millisecond}}); err == nil {
		t.Error("accepted a delay above the configured maximum")
	}
	if len(n.List()) != 0 {
		t.Error("a rejected batch changed state")
	}
}

// kernelHas reads the build option from /proc/config.gz; ok is false
// when the kernel does not publish its configuration.
func kernelHas(option string) (has, ok bool) {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return false, false
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return false, false
	}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, option+"=") {
			return strings.HasSuffix(l, "=y") || strings.HasSuffix(l, "=m"), true
		}
	}
	return false, true
}

func TestNetemProbeAndCleanFailure(t *testing.T) {
	n := newTCTestNet(t)
	ok, err := NetemAvailable()
	if err != nil {
		t.Fatal(err)
	}
	has, known := kernelHas("CONFIG_NET_SCH_NETEM")
	if known && has != ok {
		t.Fatalf("probe says netem=%v, kernel config says %v", ok, has)
	}
	t.Logf("netem available: %v", ok)
	if ok {
		// Not a missing prerequisite: this kernel has what the test
		// assumes absent, so NewNetem's refusal cannot happen on it
		// (TestNetemDelaysOrRefusesCleanly covers netem working there).
		// The skip hides no regression of the probe because the
		// kernel's own config has just confirmed it; without
		// /proc/config.gz it would trust a probe that may wrongly say
		// "netem", so that is a missing prerequisite. This project's
		// machines, CI's included, have no netem: there the refusal
		// below is what runs.
		if !known {
			testenv.Missing(t, "the probe says netem and no /proc/config.gz can confirm it")
		}
		t.Skip("kernel has netem (its config says so): the refusal without netem cannot be exercised here")
	}
	n.enterA(t)
	_, err = NewNetem(NetemConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
	if !errors.Is(err, ErrNoNetem) {
		t.Fatalf("NewNetem without netem: %v, want ErrNoNetem", err)
	}
	t.Logf("NewNetem: %v", err)
	n.assertNothingLeft(t)
}

func TestNetemStateOf(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		on         WriteOn
		s          Setting
		read, writ int
	}{
		{WriteOnACKs, Setting{ReadDelay: ms, WriteDelay: 3 * ms}, 2, 6},
		{WriteOnReplies, Setting{ReadDelay: ms, WriteDelay: 3 * ms}, 6, 0},
		{WriteOnReplies, Setting{ReadDelay: 3 * ms, WriteDelay: ms}, 6, 0},
		{WriteOnReplies, Setting{WriteDelay: 1100 * time.Microsecond}, 3, 0}, // rounded up
		{WriteOnACKs, Setting{}, 0, 0},
	} {
		cfg := NetemConfig{tcConfig: tcConfig{Device: "x"}, WriteOn: tc.on}
		if err := cfg.defaults(); err != nil {
			t.Fatal(err)
		}
		st, err := cfg.stateOf(tc.s)
		if err != nil || st.read != tc.read || st.writ != tc.writ {
			t.Errorf("%v %+v: steps %d/%d (%v), want %d/%d", tc.on, tc.s, st.read, st.writ, err, tc.read, tc.writ)
		}
	}
	cfg := NetemConfig{tcConfig: tcConfig{Device: "x"}}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.stateOf(Setting{WriteDelay: 21 * ms}); err == nil {
		t.Error("accepted a write delay above the maximum")
	}
}
