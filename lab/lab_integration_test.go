package lab

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
)

func TestMain(m *testing.M) {
	ServeIfAsked()
	rc := m.Run()
	if renamed.dir != "" {
		os.RemoveAll(renamed.dir)
	}
	os.Exit(rc)
}

func requireLab(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if err := CheckPrereqs(); err != nil {
		testenv.RequireCommands(t, "fio-with-libiscsi: "+err.Error())
	}
}

// The foundation's acceptance test: a real lab, RPS on every veth end,
// the run lock, an idempotent Up, and nothing left after Down (the
// interference run on it: experiments' TestLabInterferenceAndCleanDown).
func TestLabUpAndCleanDown(t *testing.T) {
	s := upLab(t)
	o := s.Options
	if c := s.Capacity[0]; c.SeqWriteMBs < 5 || c.RandReadMs <= 0 {
		t.Fatalf("implausible capacity %+v", c)
	}
	// Every veth end steers by flow (RPS), so no flow is reordered by its
	// sender changing CPU.
	for _, e := range vethEnds() {
		out, err := InNS(e.NS, "cat", e.RPSPath())
		if err != nil {
			t.Fatal(err)
		}
		if m, err := strconv.ParseUint(strings.ReplaceAll(strings.TrimSpace(out), ",", ""), 16, 64); err != nil || m == 0 {
			t.Fatalf("%s %s rps_cpus %q: RPS off", e.NS, e.Dev, out)
		}
	}
	// A running experiment holds the lab: down and rebuild refuse.
	l, err := acquireRunLock()
	if err != nil {
		t.Fatal(err)
	}
	if err := Down(io.Discard); !errors.Is(err, ErrRunning) {
		t.Fatalf("down during a run: %v, want ErrRunning", err)
	}
	if _, err := acquireRunLock(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second run during a run: %v, want ErrRunning", err)
	}
	l.release()
	// Up twice is fine and keeps the same lab.
	s2, err := Up(o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s2.ServePID != s.ServePID {
		t.Fatalf("second Up rebuilt a healthy lab (supervisor %d → %d)", s.ServePID, s2.ServePID)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*Options)
	}{
		{"no resources", func(o *Options) { o.Resources = nil }},
		{"bad name", func(o *Options) { o.Resources = []string{"VG 1"} }},
		{"duplicate", func(o *Options) { o.Resources = []string{"a", "a"} }},
		{"tiny lun", func(o *Options) { o.LUNSize = 1 << 20 }},
		{"bad model", func(o *Options) { o.Model.Bandwidth = 0 }},
		{"bad rmem", func(o *Options) { o.TargetRmem = 10 }},
		{"too many targets", func(o *Options) { o.Targets = MaxTargets + 1 }},
		{"negative targets", func(o *Options) { o.Targets = -1 }},
		{"three LIO targets", func(o *Options) { o.Targets, o.Target = 3, TargetLIO }},
		{"three targets, kernel initiator", func(o *Options) { o.Targets, o.Initiator = 3, InitiatorKernel }},
	} {
		o := DefaultOptions()
		tc.mut(&o)
		if o.Validate() == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
}

// Fixtures captured in the target's namespace (bm): after an interference
// run, where every retransmission was a tail-loss probe answered by a
// DSACK; and during a mixed-I/O run at 15 ms (build c9882fa), where the
// delay line had held segments past the target's probe timer.
func TestParseTCPCounters(t *testing.T) {
	for _, tc := range []struct {
		snmp, netstat string
		want          TCPCounters
	}{
		{"testdata/snmp", "testdata/netstat", TCPCounters{RetransSegs: 29, LossProbes: 70, DSACKRecv: 70}},
		{"testdata/snmp-mixed-15ms", "testdata/netstat-mixed-15ms", TCPCounters{RetransSegs: 7, LossProbes: 7, DSACKRecv: 7, HostQueueSkips: 62}},
	} {
		snmp, err := os.ReadFile(tc.snmp)
		if err != nil {
			t.Fatal(err)
		}
		netstat, err := os.ReadFile(tc.netstat)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseTCPCounters(string(snmp), string(netstat))
		if err != nil || c != tc.want {
			t.Errorf("%s: ParseTCPCounters = %+v, %v; want %+v", tc.netstat, c, err, tc.want)
		}
		if c.NonProbe() != 0 {
			t.Errorf("%s: %d retransmissions not probes, want 0", tc.netstat, c.NonProbe())
		}
		for _, bad := range [][2]string{{"Ip: a b\nIp: 1 2\n", string(netstat)}, {string(snmp), "TcpExt: A B\nTcpExt: 1\n"}} {
			if _, err := ParseTCPCounters(bad[0], bad[1]); err == nil {
				t.Errorf("parsed %q", bad)
			}
		}
	}
}
