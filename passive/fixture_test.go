package passive

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/internal/testenv"
)

// replay feeds a pcap captured in the lab (sanqos capture --pcap on sqlan's
// port p-bm) to a meter of the lab's portal.
func replay(t *testing.T, path string) *Meter {
	t.Helper()
	zr := testenv.Gunzip(t, path)
	m, err := NewMeter([]Resource{{Name: "vg1", Portals: []netip.AddrPort{netip.MustParseAddrPort("10.99.0.1:3260")}}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := capture.ReadPcap(zr, func(pkt []byte, ts time.Time) {
		if s, ok := capture.Decode(pkt, ts); ok {
			m.Segment(s)
			n++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no segment in the fixture")
	}
	return m
}

// Real lab traffic (fio+libiscsi against tgt: the 8 KiB random reader on
// b2 and writers on b3..b5, captured mid-session): every response is
// matched to its command, the stream never loses its place, the reader's
// READs are timed at the modelled disk's service times, and the writers
// show as WRITEs with their bytes.
func TestLabCapture(t *testing.T) {
	for _, tc := range []struct {
		file              string
		readerMs          [2]float64 // plausible mean read latency
		wantWriters       bool
		minReads, minWrts uint64
		sessions          int
	}{
		// 0.6 s of autonomic's load, agent off (sanitize/main.go made it).
		{"testdata/lab-reader-writers.pcap.gz", [2]float64{1, 200}, true, 10, 100, 13},
	} {
		m := replay(t, tc.file)
		pc, gaps := m.Counters()
		// The capture began mid-session: the command each of the 13
		// sessions (12 writers, 1 reader, queue depth 1) had in flight
		// then is answered without having been seen. Every other
		// response must match.
		if pc.Unmatched > tc.sessions || pc.Resyncs != 0 || gaps != 0 || pc.Completed == 0 {
			t.Errorf("%s: parser counters %+v, gaps %d: want every response matched but ≤ %d in flight at the start, no resync", tc.file, pc, gaps, tc.sessions)
		}
		got, _ := m.Read()
		var reads, writes uint64
		for name, c := range got {
			if !strings.HasPrefix(name, DevicePrefix+"vg1:10.99.0.") {
				t.Errorf("unexpected device %s", name)
			}
			t.Logf("%s: %d reads %d ms, %d writes %d ms, %d/%d sectors read/written", name, c.Reads, c.ReadTicks, c.Writes, c.WriteTicks, c.ReadSectors, c.WriteSectors)
			writes += c.Writes
		}
		r := got[DeviceName("vg1", netip.MustParseAddr("10.99.0.2"))]
		reads = r.Reads
		if reads < tc.minReads {
			t.Fatalf("%s: %d reads of the reader, want ≥ %d", tc.file, reads, tc.minReads)
		}
		if mean := float64(r.ReadTicks) / float64(r.Reads); mean < tc.readerMs[0] || mean > tc.readerMs[1] {
			t.Errorf("%s: reader's mean read latency %.2f ms outside %v", tc.file, mean, tc.readerMs)
		}
		if r.Writes != 0 {
			t.Errorf("%s: the reader wrote %d times", tc.file, r.Writes)
		}
		if tc.wantWriters && writes < tc.minWrts {
			t.Errorf("%s: %d writes in all, want ≥ %d", tc.file, writes, tc.minWrts)
		}
	}
}
