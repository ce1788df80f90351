package lab

import (
	"errors"
	"io"
	"os"
	"path/filepath"
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
	// Every host's sessions run Linux's default congestion control, not
	// this machine's (BBR paced reads' tails 100 ms late, net.go).
	for _, e := range vethEnds() {
		if e.Dev != "eth0" || e.NS == "" {
			continue
		}
		if out, err := InNS(e.NS, "ip", "route", "show", "dev", "eth0"); err != nil || !strings.Contains(out, "congctl "+LabCongestion) {
			t.Fatalf("%s routes %q (%v), want congctl %s", e.NS, out, err, LabCongestion)
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

// Fixtures captured in the target's namespace (bm), laid out as
// /proc/PID/net for procfs: 1 after an interference run, where every
// retransmission was a tail-loss probe answered by a DSACK; 2 during a
// mixed-I/O run at 15 ms (build c9882fa), where the delay line had held
// segments past the target's probe timer. 3 and 4 are malformed.
func TestReadTCPCounters(t *testing.T) {
	for pid, want := range map[int]TCPCounters{
		1: {RetransSegs: 29, LossProbes: 70, DSACKRecv: 70},
		2: {RetransSegs: 7, LossProbes: 7, DSACKRecv: 7, HostQueueSkips: 62},
	} {
		c, err := readTCPCounters("testdata/proc", pid)
		if err != nil || c != want {
			t.Errorf("%d: readTCPCounters = %+v, %v; want %+v", pid, c, err, want)
		}
		if c.NonProbe() != 0 {
			t.Errorf("%d: %d retransmissions not probes, want 0", pid, c.NonProbe())
		}
	}
	dir := t.TempDir()
	good, _ := os.ReadFile("testdata/proc/1/net/netstat")
	for pid, files := range map[int][2]string{3: {"Ip: a b\nIp: 1 2\n", string(good)}, 4: {"Tcp: RetransSegs\nTcp: 1\n", "TcpExt: A B\nTcpExt: 1\n"}} {
		net := filepath.Join(dir, strconv.Itoa(pid), "net")
		if err := os.MkdirAll(net, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(net, "snmp"), []byte(files[0]), 0o644)
		os.WriteFile(filepath.Join(net, "netstat"), []byte(files[1]), 0o644)
		if c, err := readTCPCounters(dir, pid); err == nil {
			t.Errorf("%d: read %+v from %q", pid, c, files)
		}
	}
}

// TestReadTCPCountersInNS: the counters are the namespace's own, not the
// host's: a new namespace has sent nothing, so it has retransmitted
// nothing, whatever the host has.
func TestReadTCPCountersInNS(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.ScratchNS(t, "sqtcp", testenv.Veth{Dev: "sqtcp0", Addr: "10.231.0.1", Peer: "sqtcp1", PeerAddr: "10.231.0.2"})
	c, err := ReadTCPCounters(ns)
	if err != nil || c != (TCPCounters{}) {
		t.Errorf("ReadTCPCounters(%s) = %+v, %v; want zeros", ns, c, err)
	}
	if _, err := ReadTCPCounters(""); err != nil {
		t.Errorf("ReadTCPCounters(initial namespace): %v", err)
	}
	if _, err := ReadTCPCounters(ns + "-none"); err == nil {
		t.Error("read the counters of a namespace that does not exist")
	}
}
