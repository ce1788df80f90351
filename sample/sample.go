// Package sample reads the kernel counters sanqos steers by and turns them
// into per-interval figures: per-device read/write completions, wait times
// and sector rates from /proc/diskstats (as iostat computes them), and
// per-consumer TCP figures of the target's storage connections from
// sock_diag (TCP_INFO: bytes each way, srtt, min_rtt, delivery rate, in
// flight; tcpinfo.go, with exact per-connection lookups between dumps in
// tcpexact.go and raw non-blocking system calls in rawio.go).
//
// It only reads: it never writes to /proc or /sys, never changes a socket,
// never filters or smooths (that is package filter's job) and knows
// nothing of resources or policy.
//
// Imports (sanqos): none.
package sample

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"time"
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
func Diff(prev, cur Counters) (iv Interval, err error) {
	err = DiffSeconds(&iv, &prev, &cur, cur.Time.Sub(prev.Time).Seconds())
	return iv, err
}

// DiffSeconds is Diff into *iv with cur.Time − prev.Time in seconds
// given: a snapshot's devices share their times, so a caller diffing
// thousands of them computes it once (it was a third of Diff), and
// writes each interval in place.
func DiffSeconds(iv *Interval, prev, cur *Counters, secs float64) error {
	*iv = Interval{Device: cur.Device, Start: prev.Time, Seconds: secs, InFlight: cur.InFlight}
	if iv.Seconds <= 0 {
		return fmt.Errorf("%s: non-increasing sample times", cur.Device)
	}
	var rt, wt, rs, ws uint64
	var ok0, ok1, ok2, ok3, ok4, ok5 bool
	iv.Reads, ok0 = Delta(prev.Reads, cur.Reads, countBits)
	iv.Writes, ok1 = Delta(prev.Writes, cur.Writes, countBits)
	rt, ok2 = Delta(prev.ReadTicks, cur.ReadTicks, tickBits)
	wt, ok3 = Delta(prev.WriteTicks, cur.WriteTicks, tickBits)
	rs, ok4 = Delta(prev.ReadSectors, cur.ReadSectors, countBits)
	ws, ok5 = Delta(prev.WriteSectors, cur.WriteSectors, countBits)
	if !(ok0 && ok1 && ok2 && ok3 && ok4 && ok5) {
		return fmt.Errorf("%s: counters went backwards (device reset)", cur.Device)
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
	return nil
}

// Diskstats reads /proc/diskstats.
//
// It parses the file itself rather than through prometheus/procfs, which
// it used before: procfs opens the file and runs fmt.Sscanf over all 20
// fields of every line on each call (~65 µs and 84 allocations for the
// lab's ten devices, every tick), and offers neither buffer reuse nor a
// way to parse only the seven fields used. Here the file stays open and
// is re-read from offset 0 (a seq_file regenerates on each read from the
// start) into a reused buffer, and device names are interned, so a read
// allocates only its result. Lines parse as procfs parsed them: those
// with fewer than 14 fields (kernels before 4.18 print 14, later 18 or
// 20) are skipped, a non-number among the first 20 is an error.
type Diskstats struct {
	path  string
	f     *os.File // nil until the first read, and after a failed one
	rc    syscall.RawConn
	read  func(fd uintptr) bool // d.readAll, made once
	n     int                   // bytes read (readAll)
	rerr  error                 // readAll's error
	buf   []byte
	names map[string]string // interned device names
	now   func() time.Time
	// snap is the last Snapshot, layout its layout number.
	snap   []Counters
	layout uint64
}

// NewDiskstats reads from the given proc and sys mount points ("/proc",
// "/sys" on a live system; fixture directories in tests). Both must be
// directories; only proc is read.
func NewDiskstats(proc, sys string) (*Diskstats, error) {
	for _, dir := range []string{proc, sys} {
		info, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("could not read %q: %w", dir, err)
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("mount point %q is not a directory", dir)
		}
	}
	return &Diskstats{path: filepath.Join(proc, "diskstats"), buf: make([]byte, 4096), names: map[string]string{}, now: time.Now}, nil
}

// Read returns the counters of the named devices (all devices if names is
// empty), keyed by device name.
func (d *Diskstats) Read(names ...string) (map[string]Counters, error) {
	all, _, err := d.Snapshot()
	if err != nil {
		return nil, err
	}
	var want map[string]bool
	if len(names) > 0 {
		want = make(map[string]bool, len(names))
		for _, n := range names {
			want[n] = true
		}
	}
	out := make(map[string]Counters, len(names))
	for _, c := range all {
		if want == nil || want[c.Device] {
			out[c.Device] = c
		}
	}
	return out, nil
}

// Snapshot returns every device's counters in the file's order, in a
// slice the next call reuses, and a layout number that changes only when
// the devices listed or their order do: a caller that indexed the slice
// once by name can keep its indexes (the agent's tick, at 10,000
// devices, looked each one up by name).
func (d *Diskstats) Snapshot() ([]Counters, uint64, error) {
	text, err := d.readFile()
	if err != nil {
		return nil, 0, err
	}
	now := d.now()
	out, moved := d.snap[:0], false
	for len(text) > 0 {
		var line []byte
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, nil
		}
		var f [diskstatsFields]uint64
		name, n, err := parseDiskstatsLine(line, &f)
		if err != nil {
			return nil, 0, err
		}
		if n < 14 {
			continue
		}
		dev, ok := d.names[string(name)]
		if !ok {
			if len(d.names) >= 1<<12 {
				clear(d.names) // devices come and go: bound the table
			}
			dev = string(name)
			d.names[dev] = dev
		}
		moved = moved || len(out) >= len(d.snap) || d.snap[len(out)].Device != dev
		out = append(out, Counters{
			Device: dev, Time: now,
			Reads: f[3], ReadSectors: f[5], ReadTicks: f[6],
			Writes: f[7], WriteSectors: f[9], WriteTicks: f[10],
			InFlight: f[11],
		})
	}
	if moved || len(out) != len(d.snap) {
		d.layout++
	}
	d.snap = out
	return out, d.layout, nil
}

// readFile reads the whole file from offset 0 into d.buf, growing it as
// needed, over a descriptor kept open between calls. The reads are raw
// system calls (rawio.go): a proc file is generated in the read, which
// never waits.
func (d *Diskstats) readFile() ([]byte, error) {
	if d.f == nil {
		f, err := os.Open(d.path)
		if err != nil {
			return nil, err
		}
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return nil, err
		}
		d.f, d.rc = f, rc
		if d.read == nil {
			d.read = d.readAll
		}
	}
	d.n, d.rerr = 0, nil
	err := d.rc.Read(d.read)
	if err == nil {
		err = d.rerr
	}
	if err != nil {
		d.f.Close()
		d.f = nil
		return nil, fmt.Errorf("read %s: %w", d.path, err)
	}
	return d.buf[:d.n], nil
}

// readAll is readFile's RawConn.Read callback: the file from offset 0
// into d.buf[:d.n], the error in d.rerr (fields, not a closure, so a
// tick allocates nothing for it).
func (d *Diskstats) readAll(fd uintptr) bool {
	for {
		if d.n == len(d.buf) {
			d.buf = append(d.buf, make([]byte, len(d.buf))...)
		}
		k, err := rawPread(int(fd), d.buf[d.n:], int64(d.n))
		if err != nil || k == 0 {
			d.rerr = err
			return true
		}
		d.n += k
	}
}

// diskstatsFields is how many fields of a line are parsed (and checked):
// major, minor, name and 17 counters, as procfs.
const diskstatsFields = 20

// parseDiskstatsLine splits a line into its fields, parsing all but the
// name (field 2) as unsigned decimals into f, and returns the name and
// how many fields it has (at most diskstatsFields). A line of fewer than
// three fields is not a device and has n < 14.
func parseDiskstatsLine(line []byte, f *[diskstatsFields]uint64) (name []byte, n int, err error) {
	for n < diskstatsFields {
		for len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			line = line[1:]
		}
		if len(line) == 0 {
			break
		}
		end := 0
		for end < len(line) && line[end] != ' ' && line[end] != '\t' {
			end++
		}
		tok := line[:end]
		line = line[end:]
		if n == 2 {
			name = tok
		} else {
			v, ok := parseUint(tok)
			if !ok {
				return nil, 0, fmt.Errorf("diskstats: field %d %q is not a counter", n+1, tok)
			}
			f[n] = v
		}
		n++
	}
	return name, n, nil
}

// parseUint parses an unsigned decimal that fits 64 bits.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
