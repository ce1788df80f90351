package experiments

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
