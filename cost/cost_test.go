package cost

import (
	"math"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab/diskmodel"
)

// The estimate against the lab's modelled group (which knows whether
// each request is sequential) for the shapes the lab's interferers and
// reader produce: exact where size and sequentiality go together, and the
// 64 KiB random request undercharged by the size rule, as documented.
func TestRequestAgainstDiskModel(t *testing.T) {
	truth := diskmodel.DefaultParams()
	m := Default()
	for _, tc := range []struct {
		name              string
		write, sequential bool
		bytes             int
		// ratio is estimate / truth.
		ratio float64
	}{
		{"reader: 8 KiB random read", false, false, 8 << 10, 1},
		{"4 KiB random read", false, false, 4 << 10, 1},
		{"VM, database: 8 KiB random write", true, false, 8 << 10, 1},
		{"backup: 64 KiB sequential read", false, true, 64 << 10, 1},
		{"thesis writer: 64 KiB sequential write", true, true, 64 << 10, 1},
		{"256 KiB sequential read", false, true, 256 << 10, 1},
		{"64 KiB random read (charged as sequential)", false, false, 64 << 10, 0.27},
		{"32 KiB random write (two thirds of a seek)", true, false, 32 << 10, 0.76},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := truth.Service(tc.write, tc.sequential, tc.bytes)
			got := m.Request(tc.write, float64(tc.bytes))
			if r := float64(got) / float64(want); math.Abs(r-tc.ratio) > 0.01 {
				t.Errorf("estimate %v, model %v: ratio %.3f, want %.2f", got, want, r, tc.ratio)
			}
		})
	}
}

// Costs add up in resource time: the lab's backup (three hosts, 28 MB/s
// of 64 KiB sequential reads) keeps the group ~80 % busy, and the reader
// (32 random 8 KiB reads a second) ~17 %: the backup saturates it.
func TestRateOfLabLoads(t *testing.T) {
	m := Default()
	backup := m.Of(28e6/65536, 28e6, 0, 0)
	reader := m.Of(32, 32*8192, 0, 0)
	if backup.Read < 0.75 || backup.Read > 0.85 || backup.Write != 0 {
		t.Errorf("backup %+v, want ~0.8 s/s of reads", backup)
	}
	if reader.Read < 0.16 || reader.Read > 0.18 {
		t.Errorf("reader %+v, want ~0.17 s/s", reader)
	}
	if m.Rate(false, 0, 1e6) != 0 {
		t.Error("bytes without requests cost something")
	}
	if got := m.Bytes(28e6, 1e6); math.Abs(got.Read-0.7) > 1e-9 || math.Abs(got.Write-0.05) > 1e-9 {
		t.Errorf("28 MB/s read, 1 MB/s written priced %+v, want 0.7 and 0.05 s/s of transfer", got)
	}
	if got := (Model{}).Of(100, 1e6, 100, 1e6); got != (Load{}) {
		t.Errorf("the zero model charged %+v, want nothing", got)
	}
}

func TestSplit(t *testing.T) {
	const d = 10 * time.Millisecond
	for _, tc := range []struct {
		name    string
		l       Load
		r, w    time.Duration
		readFra float64
	}{
		{"pure reader", Load{Read: 0.8}, d, 0, 1},
		{"pure writer", Load{Write: 0.5}, 0, d, 0},
		{"a VM, 70/30 by cost: both ways", Load{Read: 0.7, Write: 0.3}, d, d, 0.7},
		{"write-heavy mix, a fifth in reads: both ways", Load{Read: 0.1, Write: 0.4}, d, d, 0.2},
		{"a backup with log writes: a sliver", Load{Read: 0.99, Write: 0.0099}, d, 400 * time.Microsecond, 0.99009900990099},
		{"idle", Load{}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := tc.l.Split(d)
			if r != tc.r || w != tc.w {
				t.Errorf("split %v, %v; want %v, %v", r, w, tc.r, tc.w)
			}
			if f := tc.l.ReadFraction(); math.Abs(f-tc.readFra) > 1e-9 {
				t.Errorf("read fraction %v, want %v", f, tc.readFra)
			}
		})
	}
}
