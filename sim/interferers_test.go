package sim

import (
	"math"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// A mixed job reads with its ReadFraction, and each request takes its
// own direction's path: a read's data carries the read delay, a write's
// data waits for the write delay. Alone on the disk, one stream's
// requests are a renewal process whose mean cycle is the mix of the two
// directions' cycles (RTT/2 + service + block stack + transfer), so the
// counts of reads and writes follow from the model's own formulas.
func TestMixedJobDirections(t *testing.T) {
	d := 20 * time.Millisecond
	for _, tc := range []struct {
		name  string
		job   Job
		delay throttle.Setting
		read  float64 // expected share of reads
	}{
		{"pure reader", Job{BS: 64 << 10}, throttle.Setting{}, 1},
		{"pure writer", Job{Write: true, BS: 64 << 10}, throttle.Setting{}, 0},
		{"70/30, no delay", Job{ReadFraction: 0.7, BS: 8 << 10}, throttle.Setting{}, 0.7},
		{"ReadFraction 1 reads even if Write is set", Job{ReadFraction: 1, Write: true, BS: 8 << 10}, throttle.Setting{}, 1},
		{"50/50, read delay slows only the reads", Job{ReadFraction: 0.5, BS: 64 << 10}, throttle.Setting{ReadDelay: d}, 0.5},
		{"50/50, write delay slows only the writes", Job{ReadFraction: 0.5, BS: 64 << 10}, throttle.Setting{WriteDelay: d}, 0.5},
		{"50/50 8 KiB, both delays", Job{ReadFraction: 0.5, BS: 8 << 10}, throttle.Setting{ReadDelay: d, WriteDelay: d}, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			j := tc.job
			j.Consumer, j.Device, j.Random, j.IODepth = HostAddr("b3"), "loop1", true, 1
			m := NewModel(p, 1, []Resource{{Name: "vg1", Devices: Devices}}, []*Job{&j})
			m.Throttle().SetDirect(j.Consumer, tc.delay)
			const length = 60 * time.Second
			m.RunUntil(length)
			c, _ := m.Read("loop1")
			reads, writes := float64(c["loop1"].Reads), float64(c["loop1"].Writes)
			cycle := func(write bool, delay time.Duration) float64 {
				return float64(p.RTT/2+p.service(write, false, j.BS)+p.DeviceLatency+p.transfer(write, j.BS, delay)) / 1e9
			}
			mean := tc.read*cycle(false, tc.delay.ReadDelay) + (1-tc.read)*cycle(true, tc.delay.WriteDelay)
			want := length.Seconds() / mean
			if n := reads + writes; math.Abs(n-want)/want > 0.03 {
				t.Errorf("%.0f requests, want %.0f ± 3%% (mean cycle %.2f ms)", n, want, mean*1e3)
			}
			if got := reads / (reads + writes); math.Abs(got-tc.read) > 0.03 {
				t.Errorf("read share %.3f, want %.2f", got, tc.read)
			}
		})
	}
}
