package experiments

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// TestDelaySamplesCSVs: a run's delays and its controller state land in
// two files named for the phase, and a tick without reads (NaN) is an
// empty cell, not "NaN", so a spreadsheet or pandas reads it as missing.
func TestDelaySamplesCSVs(t *testing.T) {
	ds := delaySamples{
		rows: [][]string{{"1.0", "10.99.0.3", "0.50", "19.00"}},
		loop: [][]string{{"1.0", "vg1", msCell(8.7), msCell(math.NaN()), msCell(math.Inf(1)), msCell(19)}},
	}
	dir := t.TempDir()
	if err := ds.writeCSVs(dir, "threshold-10ms"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"delays-threshold-10ms.csv": "t_s,consumer,read_delay_ms,write_delay_ms\n1.0,10.99.0.3,0.50,19.00\n",
		"loop-threshold-10ms.csv":   "t_s,resource,setpoint_ms,indicator_ms,raw_wait_ms,delay_ms\n1.0,vg1,8.70,,,19.00\n",
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("%s:\n%s\nwant\n%s", name, b, want)
		}
	}
}

// TestDelaySamplesTCP: the target's TCP counters, read from the agent's
// namespace through /proc/PID/net (here this test's own), land in
// tcp-PHASE.csv one row per sample; a run without them (bridge mode)
// writes no such file.
func TestDelaySamplesTCP(t *testing.T) {
	var ds delaySamples
	ds.sampleTCP(2*time.Second, os.Getpid())
	ds.sampleTCP(3*time.Second, -1) // no such process: the second is left out
	if len(ds.tcp) != 1 || ds.tcp[0][0] != "2.0" || len(ds.tcp[0]) != 6 {
		t.Fatalf("rows %q, want one row of six cells at 2.0 s", ds.tcp)
	}
	dir := t.TempDir()
	if err := ds.writeCSVs(dir, "threshold-15ms"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tcp-threshold-15ms.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "t_s,retrans_segs,loss_probes,dsack_recv,rto_timeouts,host_queue_skips\n2.0,"; !strings.HasPrefix(string(b), want) {
		t.Errorf("tcp csv:\n%s\nwant prefix %q", b, want)
	}
	if err := (&delaySamples{}).writeCSVs(dir, "bridge"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tcp-bridge.csv")); !os.IsNotExist(err) {
		t.Errorf("tcp-bridge.csv written without samples (stat: %v)", err)
	}
}

// TestProbesAtStalls: loss probes are matched to the seconds they were
// counted in, and a second counts as stalled if a stall episode of at
// least 8 ms overlaps it (widened by the sampling slack). Times from
// read-backup s1-r1-c9882fa's 20 ms phase, whose two probes came 17 s
// into a step; the stalls are made up around them.
func TestProbesAtStalls(t *testing.T) {
	ds := delaySamples{
		tcpAt:  []float64{16, 17, 18, 19, 20, 21},
		probes: []uint64{3, 3, 4, 4, 6, 6},
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name   string
		stalls []lab.Stall
		want   report.ProbesAtStalls
	}{
		{"no stalls", nil, report.ProbesAtStalls{At: 0, Of: 3}},
		{"a stall in the second of one probe", []lab.Stall{{T: ms(17400), CPU: 1, Late: ms(12)}}, report.ProbesAtStalls{At: 1, Of: 3}},
		{"short stalls do not count", []lab.Stall{{T: ms(17400), CPU: 1, Late: ms(6)}, {T: ms(19500), CPU: 0, Late: ms(7.9)}}, report.ProbesAtStalls{At: 0, Of: 3}},
		{"a stall just after a sample counts for it (slack)", []lab.Stall{{T: ms(20150), CPU: 0, Late: ms(20)}}, report.ProbesAtStalls{At: 2, Of: 3}},
		{"a stall in a second without probes explains none", []lab.Stall{{T: ms(18500), CPU: 0, Late: ms(30)}}, report.ProbesAtStalls{At: 0, Of: 3}},
		{"probes before the first sample are not in Of", []lab.Stall{{T: ms(15500), CPU: 0, Late: ms(30)}}, report.ProbesAtStalls{At: 0, Of: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ds.probesAtStalls(tc.stalls); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestTCPSamplerEverySecond: a phase without an agent (the baseline)
// samples the target's TCP counters at each whole second before its end,
// from the pid it is given, into tcp-baseline.csv alone.
func TestTCPSamplerEverySecond(t *testing.T) {
	var ds delaySamples
	ev := tcpSampler(os.Getpid(), 3500*time.Millisecond, &ds)
	if len(ev) != 3 || ev[0].At != time.Second || ev[2].At != 3*time.Second {
		t.Fatalf("events %+v, want three at 1, 2, 3 s", ev)
	}
	for _, e := range ev {
		if err := e.Do(); err != nil {
			t.Fatal(err)
		}
	}
	if len(ds.tcp) != 3 || ds.tcp[2][0] != "3.0" || len(ds.probes) != 3 || ds.tcpAt[1] != 2 {
		t.Fatalf("rows %q (times %v), want three, at 1.0, 2.0, 3.0", ds.tcp, ds.tcpAt)
	}
	dir := t.TempDir()
	if err := ds.writeTCP(dir, "baseline"); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(names) != 1 || filepath.Base(names[0]) != "tcp-baseline.csv" {
		t.Errorf("files %v, want tcp-baseline.csv alone", names)
	}
}
