package experiments

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestDelaySamplesCSVs: a run's delays and its controller state land in
// two files named for the phase, and a tick without reads (NaN) is an
// empty cell, not "NaN", so a spreadsheet or pandas reads it as missing.
func TestDelaySamplesCSVs(t *testing.T) {
	ds := delaySamples{
		rows: [][]string{{"1.0", "10.99.0.3", "0.50", "19.00", "12.30"}},
		loop: [][]string{{"1.0", "vg1", msCell(8.7), msCell(math.NaN()), msCell(math.Inf(1)), msCell(19)}},
	}
	dir := t.TempDir()
	if err := ds.writeCSVs(dir, "threshold-10ms"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"delays-threshold-10ms.csv": "t_s,consumer,read_delay_ms,write_delay_ms,send_srtt_ms\n1.0,10.99.0.3,0.50,19.00,12.30\n",
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
