// Package sample reads the kernel counters sanqos steers by and turns them
// into per-interval figures: per-device read/write completions, wait times
// and sector rates from /proc/diskstats (as iostat computes them).
//
// It only reads: it never writes to /proc or /sys, never filters or smooths
// (that is package filter's job) and knows nothing of resources or policy.
package sample

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/procfs/blockdevice"
)

// Counters is one device's cumulative /proc/diskstats counters at a moment.
type Counters struct {
	Device       string
	Time         time.Time
	Reads        uint64
	ReadSectors  uint64
	ReadTicks    uint64 // ms spent by all reads
	Writes       uint64
	WriteSectors uint64
	WriteTicks   uint64 // ms spent by all writes
	InFlight     uint64
}

// Interval is what happened on one device between two Counters.
type Interval struct {
	Device  string
	Start   time.Time
	Seconds float64
	Reads   uint64
	Writes  uint64
	// ReadWaitMs is Δread ticks / Δreads (iostat's r_await); NaN when no
	// read completed in the interval, so "no data" never reads as "fast".
	ReadWaitMs  float64
	WriteWaitMs float64
	ReadBps     float64 // bytes/s
	WriteBps    float64
	InFlight    uint64
}

// Widths of the kernel's counters. Since Linux 4.19 the I/O and sector
// counts are unsigned long (64 bits here) but the tick fields are printed
// from an unsigned int of milliseconds, so they wrap every 49.7 days.
const (
	countBits = 64
	tickBits  = 32
)

// Delta returns cur−prev for a counter of the given width, allowing one wrap.
// A decrease that cannot be a wrap (the counter was reset, e.g. the device
// was re-created) reports ok=false.
func Delta(prev, cur uint64, bits uint) (d uint64, ok bool) {
	if cur >= prev {
		return cur - prev, true
	}
	if bits >= 64 {
		// 2^64 wrap: unsigned subtraction already wraps correctly, but a
		// 64-bit counter wrapping within one interval is implausible: treat
		// a decrease as a reset.
		return 0, false
	}
	limit := uint64(1) << bits
	if prev >= limit {
		return 0, false
	}
	return cur + limit - prev, true
}

// Diff computes the interval between two samples of the same device. It
// returns an error if the counters went backwards in a way a wrap cannot
// explain, which means the device was replaced: the caller should restart
// its baseline rather than report nonsense.
func Diff(prev, cur Counters) (Interval, error) {
	iv := Interval{Device: cur.Device, Start: prev.Time, Seconds: cur.Time.Sub(prev.Time).Seconds(), InFlight: cur.InFlight}
	if iv.Seconds <= 0 {
		return iv, fmt.Errorf("%s: non-increasing sample times", cur.Device)
	}
	var ok [6]bool
	var rt, wt, rs, ws uint64
	iv.Reads, ok[0] = Delta(prev.Reads, cur.Reads, countBits)
	iv.Writes, ok[1] = Delta(prev.Writes, cur.Writes, countBits)
	rt, ok[2] = Delta(prev.ReadTicks, cur.ReadTicks, tickBits)
	wt, ok[3] = Delta(prev.WriteTicks, cur.WriteTicks, tickBits)
	rs, ok[4] = Delta(prev.ReadSectors, cur.ReadSectors, countBits)
	ws, ok[5] = Delta(prev.WriteSectors, cur.WriteSectors, countBits)
	for _, o := range ok {
		if !o {
			return iv, fmt.Errorf("%s: counters went backwards (device reset)", cur.Device)
		}
	}
	iv.ReadWaitMs, iv.WriteWaitMs = math.NaN(), math.NaN()
	if iv.Reads > 0 {
		iv.ReadWaitMs = float64(rt) / float64(iv.Reads)
	}
	if iv.Writes > 0 {
		iv.WriteWaitMs = float64(wt) / float64(iv.Writes)
	}
	iv.ReadBps = float64(rs*512) / iv.Seconds
	iv.WriteBps = float64(ws*512) / iv.Seconds
	return iv, nil
}

// Diskstats reads /proc/diskstats through procfs.
type Diskstats struct {
	fs  blockdevice.FS
	now func() time.Time
}

// NewDiskstats reads from the given proc and sys mount points ("/proc",
// "/sys" on a live system; fixture directories in tests).
func NewDiskstats(proc, sys string) (*Diskstats, error) {
	fs, err := blockdevice.NewFS(proc, sys)
	if err != nil {
		return nil, err
	}
	return &Diskstats{fs: fs, now: time.Now}, nil
}

// Read returns the counters of the named devices (all devices if names is
// empty), keyed by device name.
func (d *Diskstats) Read(names ...string) (map[string]Counters, error) {
	stats, err := d.fs.ProcDiskstats()
	if err != nil {
		return nil, err
	}
	now := d.now()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := make(map[string]Counters, len(names))
	for _, s := range stats {
		if len(want) > 0 && !want[s.DeviceName] {
			continue
		}
		out[s.DeviceName] = Counters{
			Device: s.DeviceName, Time: now,
			Reads: s.ReadIOs, ReadSectors: s.ReadSectors, ReadTicks: s.ReadTicks,
			Writes: s.WriteIOs, WriteSectors: s.WriteSectors, WriteTicks: s.WriteTicks,
			InFlight: s.IOsInProgress,
		}
	}
	return out, nil
}
