package passive

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/iscsipdu"
	"github.com/sanqos/sanqos/nvmetcp"
)

const (
	iscsiPcap = "testdata/lab-reader-writers.pcap.gz"
	nvmePcap  = "../nvmetcp/testdata/guest-nvme.pcap.gz"
)

// labResources are the lab's iSCSI portal (vg1, protocol by default) and
// the guest's NVMe/TCP port (nv1, said), metered side by side.
var labResources = []Resource{
	{Name: "vg1", Portals: []netip.AddrPort{netip.MustParseAddrPort("10.99.0.1:3260")}},
	{Name: "nv1", Portals: []netip.AddrPort{netip.MustParseAddrPort("10.99.0.1:4420")}, Protocol: NVMeTCP},
}

// segments decodes a pcap captured in the lab (sanqos capture --pcap).
func segments(t *testing.T, path string) []capture.Segment {
	t.Helper()
	var out []capture.Segment
	if err := capture.ReadPcap(testenv.Gunzip(t, path), func(pkt []byte, ts time.Time) {
		if s, ok := capture.Decode(pkt, ts); ok {
			s.Payload = slices.Clone(s.Payload)
			out = append(out, s)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no segment", path)
	}
	return out
}

// replay feeds pcaps, merged in time order, to one meter of rs.
func replay(t *testing.T, rs []Resource, paths ...string) *Meter {
	t.Helper()
	m, err := NewMeter(rs)
	if err != nil {
		t.Fatal(err)
	}
	var all []capture.Segment
	for _, p := range paths {
		all = append(all, segments(t, p)...)
	}
	slices.SortStableFunc(all, func(a, b capture.Segment) int { return a.Time.Compare(b.Time) })
	for _, s := range all {
		m.Segment(s)
	}
	return m
}

// opStat is one host's commands of one kind: count and summed latency.
type opStat struct {
	n  uint64
	ns int64
}

// nvmeDirect times the NVMe/TCP capture with nvmetcp's Tracker alone, as
// nvmetcp's own fixture test does: what the meter must agree with.
func nvmeDirect(t *testing.T) map[netip.Addr]*[2]opStat {
	out := map[netip.Addr]*[2]opStat{}
	tr := nvmetcp.NewTracker(nvmetcp.Options{}, func(s nvmetcp.Sample) {
		if s.Op == nvmetcp.OpOther {
			return
		}
		if out[s.Host] == nil {
			out[s.Host] = &[2]opStat{}
		}
		st := &out[s.Host][s.Op-nvmetcp.OpRead]
		st.n++
		st.ns += int64(s.Latency)
	})
	re := iscsipdu.NewReassembler(tr)
	for _, s := range segments(t, nvmePcap) {
		f, d := nvmetcp.Flow{Initiator: s.Src, Target: s.Dst}, nvmetcp.ToTarget
		if s.Src.Port() == nvmetcp.Port {
			f, d = nvmetcp.Flow{Initiator: s.Dst, Target: s.Src}, nvmetcp.ToInitiator
		}
		re.Segment(f, d, s.Seq, s.Payload, s.Time)
		if s.Flags&(capture.FIN|capture.RST) != 0 {
			re.Close(f)
			tr.Close(f)
		}
	}
	return out
}

// NVMe/TCP in bridge mode: the guest's capture (nvmetcp/fixture_test.go
// says what it holds) through a meter with an NVMe/TCP resource beside an
// iSCSI one gives each host the reads, writes and mean latencies
// nvmetcp's Tracker gives on its own; the iSCSI resource sees none of it.
func TestNVMeCapture(t *testing.T) {
	want := nvmeDirect(t)
	for _, tc := range []struct {
		name string
		rs   []Resource
	}{
		{"said", labResources},
		{"by port", []Resource{labResources[0], {Name: "nv1", Portals: labResources[1].Portals}}},
	} {
		m := replay(t, tc.rs, nvmePcap)
		got, _ := m.Read()
		for name, c := range got {
			// b2 only kept its connection alive: bytes, no command.
			if c.Reads+c.Writes > 0 && want[netip.MustParseAddr(name[strings.LastIndexByte(name, ':')+1:])] == nil {
				t.Errorf("%s: device %s timed commands nvmetcp did not", tc.name, name)
			}
		}
		for host, w := range want {
			c, ok := got[DeviceName("nv1", host)]
			if !ok {
				t.Errorf("%s: no device of %v", tc.name, host)
				continue
			}
			t.Logf("%s %v: %d reads %d ms, %d writes %d ms (direct %+v)", tc.name, host, c.Reads, c.ReadTicks, c.Writes, c.WriteTicks, *w)
			for i, g := range [][2]uint64{{c.Reads, c.ReadTicks}, {c.Writes, c.WriteTicks}} {
				// Ticks are ms truncated from the nanosecond sum.
				if g[0] != w[i].n || math.Abs(float64(g[1])-float64(w[i].ns)/1e6) >= 1 {
					t.Errorf("%s %v op %d: %d commands %d ms, direct %d commands %.3f ms", tc.name, host, i, g[0], g[1], w[i].n, float64(w[i].ns)/1e6)
				}
			}
		}
		if pc, gaps := m.Counters(); pc.Completed == 0 || gaps != 0 {
			t.Errorf("%s: counters %+v, gaps %d", tc.name, pc, gaps)
		}
		if _, ok := m.Consumers()["vg1"]; !ok {
			t.Errorf("%s: the iSCSI resource is gone", tc.name)
		}
	}
	if len(want) < 3 {
		t.Errorf("direct: hosts %v, want b3, b4 and b5", want)
	}
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
		// The NVMe/TCP capture rides along: its resource is another.
		m := replay(t, labResources, tc.file, nvmePcap)
		pc, gaps := replay(t, labResources[:1], tc.file).Counters()
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
			if strings.HasPrefix(name, DevicePrefix+"nv1:") {
				continue
			}
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
