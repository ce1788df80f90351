package sample

import (
	"math"
	"testing"
	"time"
)

func TestDelta(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur uint64
		bits      uint
		want      uint64
		ok        bool
	}{
		{"increase", 100, 250, 32, 150, true},
		{"no change", 7, 7, 64, 0, true},
		{"32-bit tick wrap", math.MaxUint32 - 9, 20, 32, 30, true},
		{"64-bit decrease is a reset", 1000, 10, 64, 0, false},
		{"32-bit prev beyond width is a reset", 1 << 33, 10, 32, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Delta(tc.prev, tc.cur, tc.bits)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Delta(%d,%d,%d) = %d,%v; want %d,%v", tc.prev, tc.cur, tc.bits, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := Counters{Device: "loop3", Time: t0, Reads: 10, ReadTicks: 50, ReadSectors: 160, Writes: 4, WriteTicks: 40, WriteSectors: 512}
	for _, tc := range []struct {
		name               string
		cur                Counters
		wantRead, wantWrit float64 // ms; NaN = no completions
		wantRBps           float64
		wantErr            bool
	}{
		{"iostat await", Counters{Device: "loop3", Time: t0.Add(100 * time.Millisecond), Reads: 14, ReadTicks: 90, ReadSectors: 224, Writes: 6, WriteTicks: 46, WriteSectors: 768}, 10, 3, 64 * 512 / 0.1, false},
		{"no reads is NaN, not zero", Counters{Device: "loop3", Time: t0.Add(100 * time.Millisecond), Reads: 10, ReadTicks: 50, ReadSectors: 160, Writes: 5, WriteTicks: 48, WriteSectors: 640}, math.NaN(), 8, 0, false},
		{"tick wrap", Counters{Device: "loop3", Time: t0.Add(time.Second), Reads: 12, ReadTicks: 8, ReadSectors: 160, Writes: 4, WriteTicks: 40, WriteSectors: 512}, float64(8+(1<<32)-50) / 2, math.NaN(), 0, false},
		{"reset", Counters{Device: "loop3", Time: t0.Add(time.Second), Reads: 1, ReadTicks: 50}, 0, 0, 0, true},
		{"time went backwards", Counters{Device: "loop3", Time: t0.Add(-time.Second)}, 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv, err := Diff(base, tc.cur)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !sameFloat(iv.ReadWaitMs, tc.wantRead) || !sameFloat(iv.WriteWaitMs, tc.wantWrit) || !sameFloat(iv.ReadBps, tc.wantRBps) {
				t.Fatalf("got r_await %v w_await %v rBps %v; want %v %v %v", iv.ReadWaitMs, iv.WriteWaitMs, iv.ReadBps, tc.wantRead, tc.wantWrit, tc.wantRBps)
			}
		})
	}
}

func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

// The fixture is /proc/diskstats captured on this machine (kernel 6.18,
// 20 fields per line, loop devices included).
func TestReadFixture(t *testing.T) {
	d, err := NewDiskstats("testdata/proc", "testdata/sys")
	if err != nil {
		t.Fatal(err)
	}
	all, err := d.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		t.Fatalf("read %d devices from fixture, want several", len(all))
	}
	some, err := d.Read("loop0")
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != 1 || some["loop0"].Device != "loop0" {
		t.Fatalf("filter by name: got %v", some)
	}
}
