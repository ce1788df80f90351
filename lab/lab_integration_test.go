package lab

import (
	"encoding/json"
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
	os.Exit(m.Run())
}

func requireLab(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if err := CheckPrereqs(); err != nil {
		testenv.RequireCommands(t, "fio-with-libiscsi: "+err.Error())
	}
}

// The foundation's acceptance test: a real lab, a short interference run,
// the 3x effect on the reader's p95 wait, and nothing left after Down.
func TestLabInterferenceAndCleanDown(t *testing.T) {
	s := upLab(t)
	o := s.Options
	if c := s.Capacity[0]; c.SeqWriteMBs < 5 || c.RandReadMs <= 0 {
		t.Fatalf("implausible capacity %+v", c)
	}
	// Every veth end steers by flow (RPS), so no flow is reordered by its
	// sender changing CPU.
	for _, e := range vethEnds() {
		out, err := inNS(e.NS, "cat", e.RPSPath())
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
	results := t.TempDir()
	dir, err := RunExperiment("interference", RunOptions{Scale: 0.1, Results: results, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sum InterferenceSummary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Runs) != 4 {
		t.Fatalf("runs: %+v", sum.Runs)
	}
	none, twelve := sum.Runs[0], sum.Runs[3]
	t.Logf("p95 read wait: 0 writers %.2f ms, 12 writers %.2f ms (%.1fx); writes %.1f MB/s", none.ReadWaitMs.P95, twelve.ReadWaitMs.P95, sum.P95Ratio12, twelve.WriteMBs)
	if none.ReadWaitMs.N < 10 || twelve.ReadWaitMs.N < 10 {
		t.Fatalf("too few read-wait samples: %d, %d", none.ReadWaitMs.N, twelve.ReadWaitMs.N)
	}
	if twelve.ReadWaitMs.P95 < 3*none.ReadWaitMs.P95 {
		t.Errorf("12 writers raised p95 read wait only from %.2f to %.2f ms (< 3x)", none.ReadWaitMs.P95, twelve.ReadWaitMs.P95)
	}
	if none.WriteMBs != 0 || twelve.WriteMBs < 5 {
		t.Errorf("write rates: none %.2f, twelve %.2f MB/s", none.WriteMBs, twelve.WriteMBs)
	}
	for _, f := range []string{"trace.csv", "read-wait.png", "writers-12.r0/b3.json", "writers-12.r0/b2.fio", "report.html", "report-wait-vs-writers.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing result file: %v", err)
		}
	}
	trace, _ := os.ReadFile(filepath.Join(dir, "trace.csv"))
	if n := strings.Count(string(trace), "\n"); n < 4*4*100 {
		t.Errorf("trace has %d rows, want one per device per 100 ms", n)
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

// Fixtures captured in bm after an interference run: every retransmission
// was a tail-loss probe answered by a DSACK.
func TestParseTCPCounters(t *testing.T) {
	snmp, err := os.ReadFile("testdata/snmp")
	if err != nil {
		t.Fatal(err)
	}
	netstat, err := os.ReadFile("testdata/netstat")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseTCPCounters(string(snmp), string(netstat))
	if err != nil {
		t.Fatal(err)
	}
	if c.RetransSegs != 29 || c.LossProbes == 0 || c.NonProbe() > c.RetransSegs {
		t.Fatalf("%+v", c)
	}
	for _, bad := range [][2]string{{"Ip: a b\nIp: 1 2\n", string(netstat)}, {string(snmp), "TcpExt: A B\nTcpExt: 1\n"}} {
		if _, err := ParseTCPCounters(bad[0], bad[1]); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}
