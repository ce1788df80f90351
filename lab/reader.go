package lab

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The protected reader's latency as it sees it: the completion time of
// each of its reads at the initiator (fio's clat, through TCP and the
// target), beside the target's await of its LUN that trace.csv records.
// A job marked Job.Reader logs every I/O (log_avg_msec=0) to its own
// HOST-reader_clat.N.log; Runner.Run reads it into PhaseResult.Reader.

// ReaderIO is one read of the protected reader: when it completed (s
// after its fio job started, within a phase that started fio at once)
// and how long it took to complete, in ms.
type ReaderIO struct {
	T, Ms float64
}

// readerLogSuffix names a reader job's latency log: fio appends
// _clat.N.log (N the job's number in its host's file).
const readerLogSuffix = "-reader"

// ParseFioLatLog reads a fio latency log ("msec, nsec, ddir, bs, ...",
// one line per I/O with log_avg_msec=0) and returns its reads.
func ParseFioLatLog(r io.Reader) ([]ReaderIO, error) {
	var out []ReaderIO
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), ",")
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want \"msec, nsec, ddir, …\", have %q", line, sc.Text())
		}
		t, err1 := strconv.ParseUint(strings.TrimSpace(f[0]), 10, 64)
		ns, err2 := strconv.ParseUint(strings.TrimSpace(f[1]), 10, 64)
		dir := strings.TrimSpace(f[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %d: want numbers, have %q", line, sc.Text())
		}
		if dir == "0" { // reads only
			out = append(out, ReaderIO{T: float64(t) / 1e3, Ms: float64(ns) / 1e6})
		}
	}
	return out, sc.Err()
}

// ReadFioLatLog reads the fio latency log at path (ParseFioLatLog).
func ReadFioLatLog(path string) ([]ReaderIO, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ios, err := ParseFioLatLog(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ios, nil
}

// readReaderLogs reads the reader logs fio left in pdir, in time order.
func readReaderLogs(pdir string) ([]ReaderIO, error) {
	paths, _ := filepath.Glob(filepath.Join(pdir, "*"+readerLogSuffix+"_clat.*.log"))
	var out []ReaderIO
	for _, p := range paths {
		ios, err := ReadFioLatLog(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ios...)
	}
	sort.SliceStable(out, func(i, k int) bool { return out[i].T < out[k].T })
	return out, nil
}

// ReaderWindow is the reader's latency over (from, to] after its phase
// started: each read's, and the mean of the reads that completed in
// each 100 ms interval that had any (the target's trace.csv samples its
// await on the same 100 ms).
func ReaderWindow(ios []ReaderIO, from, to time.Duration) (each, windows []float64) {
	k, sum, n := -1, 0.0, 0
	for _, io := range ios {
		if io.T <= from.Seconds() || io.T > to.Seconds() {
			continue
		}
		each = append(each, io.Ms)
		// fio's clock is in whole ms: 100 ms windows in integers, so
		// that a read at 1.7 s is in [1.7, 1.8), not float's 1.6999….
		if kk := int(math.Round(io.T*1e3)) / 100; kk != k {
			if n > 0 {
				windows = append(windows, sum/float64(n))
			}
			k, sum, n = kk, 0, 0
		}
		sum += io.Ms
		n++
	}
	if n > 0 {
		windows = append(windows, sum/float64(n))
	}
	return each, windows
}
