package sample

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/procfs/blockdevice"

	"github.com/sanqos/sanqos/internal/testenv"
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

// The parser reads what prometheus/procfs reads (its former parser): on
// the fixture, on counters near 2^64 and on short and kernel-4.x lines.
func TestDiskstatsMatchesProcfs(t *testing.T) {
	fixture, err := os.ReadFile("testdata/proc/diskstats")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"fixture": string(fixture),
		"big":     " 8 0 sda 18446744073709551615 1 18446744073709551614 4294967295 5 6 7 4294967294 8 9 10 0 0 0 0 0 0\n",
		"mixed":   " 8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n 8 1 sda1 1 2 3\n\n 8 2 sda2 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "diskstats"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		fs, err := blockdevice.NewFS(dir, dir)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fs.ProcDiskstats()
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDiskstats(dir, dir)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(5, 0)
		d.now = func() time.Time { return at }
		for round := 0; round < 2; round++ { // the second over the kept-open file
			got, err := d.Read()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %d devices, procfs %d", name, len(got), len(want))
			}
			for _, s := range want {
				c := Counters{Device: s.DeviceName, Time: at, Reads: s.ReadIOs, ReadSectors: s.ReadSectors, ReadTicks: s.ReadTicks,
					Writes: s.WriteIOs, WriteSectors: s.WriteSectors, WriteTicks: s.WriteTicks, InFlight: s.IOsInProgress}
				if got[s.DeviceName] != c {
					t.Fatalf("%s: %+v, procfs %+v", name, got[s.DeviceName], c)
				}
			}
		}
	}
	for _, bad := range []string{" 8 0 sda x\n", " 8 0 sda 1 2 3 4 5 6 7 8 9 10 -11\n", " 8 0 sda 18446744073709551616 2 3 4 5 6 7 8 9 10 11\n"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "diskstats"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := NewDiskstats(dir, dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Read(); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// The live file, read twice over the kept-open descriptor: the second
// read regenerates it (counters never go back) rather than hitting EOF.
func TestDiskstatsLiveRereads(t *testing.T) {
	if _, err := os.Stat("/proc/diskstats"); err != nil {
		testenv.Missing(t, "no /proc/diskstats")
	}
	d, err := NewDiskstats("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.Read()
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || len(b) != len(a) {
		t.Fatalf("first read %d devices, second %d", len(a), len(b))
	}
	for name, c := range a {
		if b[name].Reads < c.Reads || b[name].Writes < c.Writes {
			t.Fatalf("%s went back: %+v then %+v", name, c, b[name])
		}
	}
}

// Snapshot's layout number stays while the devices and their order do,
// and changes when one appears, goes, or moves; each snapshot lists the
// file's devices in order.
func TestSnapshotLayout(t *testing.T) {
	dir := t.TempDir()
	d, err := NewDiskstats(dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	line := func(name string, reads int) string {
		return fmt.Sprintf(" 8 0 %s %d 0 8 1 0 0 0 0 0 1 1\n", name, reads)
	}
	var last uint64
	for i, tc := range []struct {
		text  string
		devs  []string
		moved bool
	}{
		{line("sda", 1) + line("sdb", 1), []string{"sda", "sdb"}, true},
		{line("sda", 2) + line("sdb", 5), []string{"sda", "sdb"}, false},
		{line("sda", 3) + line("sdb", 6) + line("sdc", 1), []string{"sda", "sdb", "sdc"}, true},
		{line("sdb", 7) + line("sda", 4) + line("sdc", 2), []string{"sdb", "sda", "sdc"}, true},
		{line("sdb", 8) + line("sda", 5), []string{"sdb", "sda"}, true},
		{line("sdb", 9) + line("sda", 6), []string{"sdb", "sda"}, false},
	} {
		// Rewritten in place: the kept-open descriptor reads it from 0.
		if err := os.WriteFile(filepath.Join(dir, "diskstats"), []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		got, layout, err := d.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range got {
			names = append(names, c.Device)
		}
		if !slices.Equal(names, tc.devs) || (layout != last) != tc.moved {
			t.Errorf("read %d: devices %v layout %d (was %d), want %v, changed %v", i, names, layout, last, tc.devs, tc.moved)
		}
		last = layout
	}
}
