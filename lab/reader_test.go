package lab

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The protected reader's latency at the initiator, from fio's per-read
// log: testdata/reader_clat.log is 0.5 s of a real run's log (read-backup
// at scale 0.25, agent off, the reader alone before the backup: one read
// of 125 ms among 7 ms ones). Each read in (from, to] counts, and each
// 100 ms window is the mean of the reads that completed in it.
func TestReaderWindow(t *testing.T) {
	fixture, err := os.ReadFile("testdata/reader_clat.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, log string
		from, to  time.Duration
		each      int
		max       float64   // ms, the slowest read
		windows   []float64 // ms, to the µs
		err       string
	}{
		{name: "real run, whole", log: string(fixture), to: 10 * time.Second, each: 16, max: 125.136266,
			windows: []float64{7.273271, 22.927049, 7.972919, 7.318166}},
		// The slow read and the ones queued behind it: one window of 8.
		{name: "real run, 1.5-1.8 s", log: string(fixture), from: 1500 * time.Millisecond, to: 1800 * time.Millisecond,
			each: 11, max: 125.136266, windows: []float64{22.927049, 7.972919}},
		{name: "writes are not the reader's", log: "10, 2000000, 0, 8192, 0\n20, 90000000, 1, 8192, 0\n",
			to: time.Second, each: 1, max: 2, windows: []float64{2}},
		// Whole ms: 1.7 s opens the window [1.7, 1.8).
		{name: "window edges", log: "1699, 1000000, 0, 8192, 0\n1700, 3000000, 0, 8192, 0\n1799, 5000000, 0, 8192, 0\n",
			to: 2 * time.Second, each: 3, max: 5, windows: []float64{1, 4}},
		{name: "nothing in the window", log: "10, 2000000, 0, 8192, 0\n", from: time.Second, to: 2 * time.Second},
		{name: "not a latency log", log: "10, 2000000\n", err: "line 1"},
		{name: "not numbers", log: "t, v, 0, 0, 0\n", err: "want numbers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ios, err := ParseFioLatLog(strings.NewReader(tc.log))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			each, windows := ReaderWindow(ios, tc.from, tc.to)
			if len(each) != tc.each || (tc.each > 0 && slices.Max(each) != tc.max) {
				t.Errorf("%d reads, max %v ms; want %d, max %v", len(each), each, tc.each, tc.max)
			}
			if !slices.EqualFunc(windows, tc.windows, func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }) {
				t.Errorf("windows %v ms, want %v", windows, tc.windows)
			}
		})
	}
}
