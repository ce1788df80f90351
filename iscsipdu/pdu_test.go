package iscsipdu

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"testing"
	"time"
)

// pdu builds one PDU byte by byte: a BHS with opcode, flags, byte 3, LUN
// (peripheral addressing), ITT and CDB opcode, ahs words of AHS, a data
// segment of dsl bytes (padded to 4) and the digests dig asks for.
type pdu struct {
	op, flags, b3 byte
	lun           byte
	itt           uint32
	cdb0          byte
	ahs           int
	dsl           int
}

func (p pdu) bytes(dig Digests) []byte {
	h := make([]byte, BHSLen, BHSLen+p.ahs*4+4)
	h[0], h[1], h[3] = p.op, p.flags, p.b3
	h[4] = byte(p.ahs)
	h[5], h[6], h[7] = byte(p.dsl>>16), byte(p.dsl>>8), byte(p.dsl)
	h[9] = p.lun
	binary.BigEndian.PutUint32(h[16:20], p.itt)
	h[32] = p.cdb0
	for i := 0; i < p.ahs*4; i++ {
		h = append(h, byte(0xa0+i))
	}
	if dig.Header {
		h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, crc32.MakeTable(crc32.Castagnoli)))
	}
	data := make([]byte, (p.dsl+3)&^3)
	for i := 0; i < p.dsl; i++ {
		data[i] = byte(i * 7) // arbitrary content: must never be taken for a header
	}
	h = append(h, data...)
	if dig.Data && p.dsl > 0 {
		h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	}
	return h
}

func read10(itt uint32, lun byte) pdu {
	return pdu{op: OpSCSICommand, flags: 0xc0, lun: lun, itt: itt, cdb0: 0x28}
}
func write10(itt uint32, lun byte, immediate int) pdu {
	return pdu{op: OpSCSICommand | 0x40, flags: 0xa0, lun: lun, itt: itt, cdb0: 0x2a, dsl: immediate}
}
func dataIn(itt uint32, n int, final bool) pdu {
	p := pdu{op: OpDataIn, flags: 0x00, itt: itt, dsl: n}
	if final {
		p.flags = 0x81 // F and S: status included
	}
	return p
}
func resp(itt uint32, status byte) pdu { return pdu{op: OpSCSIResp, flags: 0x80, b3: status, itt: itt} }
func dataOut(itt uint32, n int) pdu    { return pdu{op: OpDataOut, flags: 0x80, itt: itt, dsl: n} }

var (
	ini  = netip.MustParseAddrPort("10.99.0.3:51000")
	tgt  = netip.MustParseAddrPort("10.99.0.1:3260")
	flow = Flow{Initiator: ini, Target: tgt}
	t0   = time.Unix(1000, 0)
)

// seg is one captured segment: direction, time offset and PDUs (or raw
// bytes), optionally cut into pieces of at most split bytes.
type seg struct {
	d     Direction
	at    time.Duration
	pdus  []pdu
	raw   []byte
	split int
}

func run(t *testing.T, o Options, segs []seg) ([]Sample, *Tracker) {
	t.Helper()
	var got []Sample
	tr := NewTracker(o, func(s Sample) { got = append(got, s) })
	for _, s := range segs {
		b := append([]byte(nil), s.raw...)
		for _, p := range s.pdus {
			b = append(b, p.bytes(o.Digests)...)
		}
		n := s.split
		if n == 0 {
			n = len(b)
		}
		for len(b) > 0 {
			k := min(n, len(b))
			tr.Feed(flow, s.d, b[:k], t0.Add(s.at))
			b = b[k:]
		}
	}
	return got, tr
}

type want struct {
	itt    uint32
	lun    uint64
	op     Op
	lat    time.Duration
	status byte
}

func TestLatencyMatching(t *testing.T) {
	ms := time.Millisecond
	garbage := []byte{0xff, 0x01, 0x02, 0x21, 0x00, 0xff, 0xff, 0xff, 0x13, 0x37}
	for len(garbage) < 300 {
		garbage = append(garbage, byte(len(garbage)*31+0x80)) // high bit set: never a valid BHS start
	}
	for _, tc := range []struct {
		name  string
		o     Options
		segs  []seg
		want  []want
		check func(*testing.T, *Tracker)
	}{
		{"read answered by final Data-In with status", Options{}, []seg{
			{d: ToTarget, pdus: []pdu{read10(7, 1)}},
			{d: ToInitiator, at: 5 * ms, pdus: []pdu{dataIn(7, 8192, false)}},
			{d: ToInitiator, at: 6 * ms, pdus: []pdu{dataIn(7, 8192, true)}},
		}, []want{{7, 1, OpRead, 6 * ms, 0}}, nil},
		{"write with immediate data, Data-Out, SCSI Response", Options{}, []seg{
			{d: ToTarget, pdus: []pdu{write10(9, 2, 5), dataOut(9, 65536)}},
			{d: ToInitiator, at: 12 * ms, pdus: []pdu{resp(9, 0)}},
		}, []want{{9, 2, OpWrite, 12 * ms, 0}}, nil},
		{"several PDUs per segment, out-of-order completion, CHECK CONDITION", Options{}, []seg{
			{d: ToTarget, pdus: []pdu{read10(1, 1), read10(2, 1), write10(3, 3, 0)}},
			{d: ToInitiator, at: 2 * ms, pdus: []pdu{resp(3, 0), dataIn(2, 512, true)}},
			{d: ToInitiator, at: 4 * ms, pdus: []pdu{resp(1, 0x02)}},
		}, []want{{3, 3, OpWrite, 2 * ms, 0}, {2, 1, OpRead, 2 * ms, 0}, {1, 1, OpRead, 4 * ms, 2}}, nil},
		{"PDUs split byte by byte", Options{}, []seg{
			{d: ToTarget, pdus: []pdu{write10(4, 1, 13), read10(5, 1)}, split: 1},
			{d: ToInitiator, at: 3 * ms, pdus: []pdu{dataIn(5, 100, true), resp(4, 0)}, split: 1},
		}, []want{{5, 1, OpRead, 3 * ms, 0}, {4, 1, OpWrite, 3 * ms, 0}}, nil},
		{"split across odd boundaries with AHS", Options{}, []seg{
			{d: ToTarget, pdus: []pdu{{op: OpSCSICommand, flags: 0xc0, lun: 4, itt: 11, cdb0: 0x88, ahs: 5}}, split: 7},
			{d: ToInitiator, at: ms, pdus: []pdu{dataIn(11, 4095, true)}, split: 29},
		}, []want{{11, 4, OpRead, ms, 0}}, nil},
		{"garbage before and between: resynchronise", Options{}, []seg{
			{d: ToTarget, raw: garbage, pdus: []pdu{read10(21, 1), read10(22, 1)}},
			{d: ToInitiator, at: ms, raw: garbage[:77], pdus: []pdu{resp(21, 0), resp(22, 0)}, split: 50},
		}, []want{{21, 1, OpRead, ms, 0}, {22, 1, OpRead, ms, 0}}, func(t *testing.T, tr *Tracker) {
			if tr.Counters().Resyncs != 300+77 {
				t.Errorf("resyncs %d, want every garbage byte", tr.Counters().Resyncs)
			}
		}},
		{"header and data digests", Options{Digests: Digests{Header: true, Data: true}}, []seg{
			{d: ToTarget, pdus: []pdu{write10(31, 1, 9), dataOut(31, 1000)}, split: 3},
			{d: ToInitiator, at: 2 * ms, pdus: []pdu{resp(31, 0)}},
		}, []want{{31, 1, OpWrite, 2 * ms, 0}}, nil},
		{"unmatched response and reserved ITT", Options{}, []seg{
			{d: ToTarget, pdus: []pdu{read10(0xffffffff, 1), {op: OpNOPOut, flags: 0x80, itt: 41}}},
			{d: ToInitiator, at: ms, pdus: []pdu{resp(0xffffffff, 0), resp(99, 0), {op: OpNOPIn, flags: 0x80, itt: 41}}},
		}, nil, func(t *testing.T, tr *Tracker) {
			if c := tr.Counters(); c.Unmatched != 2 || c.Commands != 1 {
				t.Errorf("counters %+v", c)
			}
		}},
		{"outstanding table is capped", Options{MaxOutstanding: 2}, []seg{
			{d: ToTarget, pdus: []pdu{read10(1, 1), read10(2, 1), read10(3, 1)}},
			{d: ToInitiator, at: ms, pdus: []pdu{resp(3, 0), resp(1, 0)}},
		}, []want{{1, 1, OpRead, ms, 0}}, func(t *testing.T, tr *Tracker) {
			if c := tr.Counters(); c.Dropped != 1 || c.Unmatched != 1 {
				t.Errorf("counters %+v", c)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, tr := run(t, tc.o, tc.segs)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d samples %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.ITT != w.itt || g.LUN != w.lun || g.Op != w.op || g.Latency != w.lat || g.Status != w.status || g.Initiator != ini.Addr() {
					t.Errorf("sample %d: %+v, want %+v", i, g, w)
				}
			}
			if tc.check != nil {
				tc.check(t, tr)
			}
		})
	}
}

func TestStatsPerInitiatorLUNOp(t *testing.T) {
	_, tr := run(t, Options{}, []seg{
		{d: ToTarget, pdus: []pdu{read10(1, 1), read10(2, 1), write10(3, 1, 0)}},
		{d: ToInitiator, at: 2 * time.Millisecond, pdus: []pdu{resp(1, 0), resp(3, 0)}},
		{d: ToInitiator, at: 6 * time.Millisecond, pdus: []pdu{resp(2, 0)}},
	})
	st := tr.TakeStats()
	r := st[Key{ini.Addr(), 1, OpRead}]
	if r.Count != 2 || r.Mean() != 4*time.Millisecond || r.Max != 6*time.Millisecond || st[Key{ini.Addr(), 1, OpWrite}].Count != 1 {
		t.Fatalf("stats %+v", st)
	}
	if len(tr.TakeStats()) != 0 {
		t.Fatal("TakeStats must start anew")
	}
}

func TestDecodeLUNAndClassify(t *testing.T) {
	for _, tc := range []struct {
		b    [8]byte
		want uint64
	}{
		{[8]byte{0, 5}, 5},
		{[8]byte{0x40 | 0x01, 0x02}, 0x102}, // flat space
		{[8]byte{0x80, 1, 2, 3}, 0x8001020300000000},
	} {
		if got := decodeLUN(tc.b[:]); got != tc.want {
			t.Errorf("decodeLUN(%x) = %#x, want %#x", tc.b, got, tc.want)
		}
	}
	for _, tc := range []struct {
		flags, cdb0 byte
		want        Op
	}{
		{0xc0, 0x28, OpRead}, {0xa0, 0x2a, OpWrite}, {0x80, 0x88, OpRead}, {0x80, 0x8a, OpWrite},
		{0xa0, 0x93, OpWrite}, // WRITE SAME(16) by the W flag
		{0x80, 0x00, OpOther}, // TEST UNIT READY
	} {
		if got := classify(tc.flags, tc.cdb0); got != tc.want {
			t.Errorf("classify(%#x, %#x) = %v, want %v", tc.flags, tc.cdb0, got, tc.want)
		}
	}
}

// A long data segment is skipped, not buffered.
func TestLongDataSegmentIsNotBuffered(t *testing.T) {
	tr := NewTracker(Options{}, nil)
	b := append(write10(1, 1, 0).bytes(Digests{}), dataOut(1, 900000).bytes(Digests{})...)
	for len(b) > 0 {
		k := min(1448, len(b))
		tr.Feed(flow, ToTarget, b[:k], t0)
		b = b[k:]
		if s := tr.tab.Flows[flow].State[ToTarget]; cap(s.Buf) > bufCap || len(s.Buf) > bufCap {
			t.Fatalf("buffer grew to %d", cap(s.Buf))
		}
	}
	tr.Feed(flow, ToInitiator, resp(1, 0).bytes(Digests{}), t0.Add(time.Millisecond))
	if c := tr.Counters(); c.Completed != 1 || c.Resyncs != 0 {
		t.Fatalf("%+v", c)
	}
}

func TestExpireAndClose(t *testing.T) {
	_, tr := run(t, Options{}, []seg{{d: ToTarget, pdus: []pdu{read10(1, 1), read10(2, 1)}}})
	tr.Expire(t0.Add(time.Second), 10*time.Second)
	if tr.tab.Flows[flow].Outstanding() != 2 {
		t.Fatal("expired too early")
	}
	tr.Expire(t0.Add(time.Minute), 10*time.Second)
	if len(tr.tab.Flows) != 0 || tr.Counters().Expired != 2 {
		t.Fatalf("flows %d counters %+v", len(tr.tab.Flows), tr.Counters())
	}
}

// FuzzFeed: arbitrary bytes, cut anywhere, in both directions, never
// panic, and the state stays bounded.
func FuzzFeed(f *testing.F) {
	f.Add(append(read10(1, 1).bytes(Digests{}), resp(1, 0).bytes(Digests{})...), uint8(7), false)
	f.Add(write10(2, 1, 77).bytes(Digests{Header: true, Data: true}), uint8(1), true)
	f.Add([]byte{0x01, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint8(3), false)
	f.Fuzz(func(t *testing.T, b []byte, split uint8, digests bool) {
		tr := NewTracker(Options{Digests: Digests{Header: digests, Data: digests}, MaxOutstanding: 64}, nil)
		n := int(split%64) + 1
		for i := 0; len(b) > 0; i++ {
			k := min(n, len(b))
			tr.Feed(flow, Direction(i%2), b[:k], t0.Add(time.Duration(i)))
			b = b[k:]
		}
		c := tr.tab.Flows[flow]
		if c == nil {
			return
		}
		for _, s := range c.State {
			if cap(s.Buf) > bufCap || s.Skip < 0 {
				t.Fatalf("stream state unbounded: cap %d skip %d", cap(s.Buf), s.Skip)
			}
		}
		if c.Outstanding() > 64 {
			t.Fatalf("%d outstanding", c.Outstanding())
		}
	})
}
