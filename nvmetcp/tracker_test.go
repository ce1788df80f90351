package nvmetcp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/iscsipdu"
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
			b = append(b, p.bytes()...)
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
	cid    uint16
	nsid   uint32
	op     Op
	lat    time.Duration
	status uint16
	qid    int
}

var icReq, icResp = pdu{typ: TypeICReq}, pdu{typ: TypeICResp}

func TestLatencyMatching(t *testing.T) {
	ms := time.Millisecond
	garbage := []byte{0xff, 0x04, 0x48, 0x00, 0x13, 0x37}
	for len(garbage) < 300 {
		garbage = append(garbage, byte(len(garbage)*31+0x80)) // never a valid type
	}
	hd := Digests{Header: true, Data: true}
	withDig := func(p pdu) pdu { p.dig = hd; return p }
	for _, tc := range []struct {
		name  string
		segs  []seg
		want  []want
		check func(*testing.T, *Tracker)
	}{
		{"read completed by C2HData SUCCESS, no response capsule", []seg{
			{d: ToTarget, pdus: []pdu{icReq, connect(1, "nqn.h", "nqn.s"), read(7, 1)}},
			{d: ToInitiator, at: 2 * ms, pdus: []pdu{icResp, resp(0x1001, 0), c2h(7, 4096, 0)}},
			{d: ToInitiator, at: 5 * ms, pdus: []pdu{c2h(7, 4096, FlagLast|FlagSuccess)}},
		}, []want{{0x1001, 0, OpOther, 2 * ms, 0, 1}, {7, 1, OpRead, 5 * ms, 0, 1}}, nil},
		{"read: last C2HData without SUCCESS waits for the response", []seg{
			{d: ToTarget, pdus: []pdu{read(7, 1)}},
			{d: ToInitiator, at: 2 * ms, pdus: []pdu{c2h(7, 8192, FlagLast)}},
			{d: ToInitiator, at: 3 * ms, pdus: []pdu{resp(7, 0)}},
		}, []want{{7, 1, OpRead, 3 * ms, 0, -1}}, nil},
		{"write: R2T, H2CData, response; status kept", []seg{
			{d: ToTarget, pdus: []pdu{write(9, 2, 0)}},
			{d: ToInitiator, at: ms, pdus: []pdu{r2t(9, 1, 65536)}},
			{d: ToTarget, at: 2 * ms, pdus: []pdu{h2c(9, 1, 65536)}, split: 1448},
			{d: ToInitiator, at: 9 * ms, pdus: []pdu{resp(9, 0x02)}},
		}, []want{{9, 2, OpWrite, 9 * ms, 2, -1}}, func(t *testing.T, tr *Tracker) {
			if tr.Counters().R2Ts != 1 {
				t.Errorf("counters %+v: want one R2T", tr.Counters())
			}
		}},
		{"admin queue: opcode 0x02 is Get Log Page, not a read", []seg{
			{d: ToTarget, pdus: []pdu{connect(0, "nqn.h", "nqn.s"), read(3, 0)}},
			{d: ToInitiator, at: ms, pdus: []pdu{resp(0x1000, 0), resp(3, 0)}},
		}, []want{{0x1000, 0, OpOther, ms, 0, 0}, {3, 0, OpOther, ms, 0, 0}}, nil},
		{"PDUs split byte by byte", []seg{
			{d: ToTarget, pdus: []pdu{connect(2, "nqn.h", "nqn.s"), write(4, 1, 13), read(5, 1)}, split: 1},
			{d: ToInitiator, at: 3 * ms, pdus: []pdu{c2h(5, 100, FlagLast|FlagSuccess), resp(4, 0)}, split: 1},
		}, []want{{5, 1, OpRead, 3 * ms, 0, 2}, {4, 1, OpWrite, 3 * ms, 0, 2}}, nil},
		{"garbage before and between: resynchronise", []seg{
			{d: ToTarget, raw: garbage, pdus: []pdu{read(21, 1), read(22, 1)}},
			{d: ToInitiator, at: ms, raw: garbage[:77], pdus: []pdu{resp(21, 0), resp(22, 0)}, split: 50},
		}, []want{{21, 1, OpRead, ms, 0, -1}, {22, 1, OpRead, ms, 0, -1}}, func(t *testing.T, tr *Tracker) {
			if tr.Counters().Resyncs != 300+77 {
				t.Errorf("resyncs %d, want every garbage byte", tr.Counters().Resyncs)
			}
		}},
		{"digests negotiated: header and data digests", []seg{
			{d: ToTarget, pdus: []pdu{{typ: TypeICReq, dig: hd}, withDig(connect(1, "nqn.h", "nqn.s")), withDig(write(31, 1, 9))}, split: 3},
			{d: ToInitiator, pdus: []pdu{{typ: TypeICResp, dig: hd}}},
			{d: ToInitiator, at: 2 * ms, pdus: []pdu{withDig(resp(31, 0))}},
		}, []want{{31, 1, OpWrite, 2 * ms, 0, 1}}, func(t *testing.T, tr *Tracker) {
			if c := tr.Counters(); c.Connects != 1 || c.Completed != 1 {
				t.Errorf("counters %+v: the Connect read, the write timed", c)
			}
		}},
		{"a header without the negotiated digest is refused", []seg{
			{d: ToTarget, pdus: []pdu{{typ: TypeICReq, dig: hd}, withDig(read(1, 1))}},
			{d: ToInitiator, pdus: []pdu{{typ: TypeICResp, dig: hd}, resp(1, 0), withDig(resp(1, 0))}},
		}, []want{{1, 1, OpRead, 0, 0, -1}}, func(t *testing.T, tr *Tracker) {
			if tr.Counters().Resyncs == 0 {
				t.Error("the digest-less response was accepted")
			}
		}},
		{"a bad header digest is refused", []seg{
			{d: ToTarget, pdus: []pdu{read(1, 1)}},
			{d: ToInitiator, raw: func() []byte { b := withDig(resp(1, 0)).bytes(); b[24] ^= 1; return b }()},
		}, nil, nil},
		{"unmatched response", []seg{
			{d: ToInitiator, pdus: []pdu{resp(99, 0), c2h(98, 10, FlagLast|FlagSuccess)}},
		}, nil, func(t *testing.T, tr *Tracker) {
			if c := tr.Counters(); c.Unmatched != 2 {
				t.Errorf("counters %+v", c)
			}
		}},
		{"outstanding table is capped", []seg{
			{d: ToTarget, pdus: []pdu{read(1, 1), read(2, 1), read(3, 1), read(4, 1), read(5, 1)}},
		}, nil, func(t *testing.T, tr *Tracker) {
			if c := tr.Counters(); c.Dropped != 1 {
				t.Errorf("counters %+v", c)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, tr := run(t, Options{MaxOutstanding: 4}, tc.segs)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d samples %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.CID != w.cid || g.NSID != w.nsid || g.Op != w.op || g.Latency != w.lat || g.Status != w.status || g.QID != w.qid || g.Host != host.Addr() {
					t.Errorf("sample %d: %+v, want %+v", i, g, w)
				}
			}
			if tc.check != nil {
				tc.check(t, tr)
			}
		})
	}
}

// The SUCCESS flag without LAST completes nothing (the spec allows
// SUCCESS only on the last PDU; a stray one must not end the timing
// early), and the response after a SUCCESS completion is unmatched.
func TestC2HDataSuccessCompletion(t *testing.T) {
	ms := time.Millisecond
	got, tr := run(t, Options{}, []seg{
		{d: ToTarget, pdus: []pdu{read(1, 5), read(2, 5)}},
		{d: ToInitiator, at: ms, pdus: []pdu{c2h(1, 512, FlagSuccess)}},
		{d: ToInitiator, at: 4 * ms, pdus: []pdu{c2h(1, 512, FlagLast|FlagSuccess), c2h(2, 512, FlagLast)}},
		{d: ToInitiator, at: 6 * ms, pdus: []pdu{resp(2, 0), resp(1, 0)}},
	})
	if len(got) != 2 || got[0].CID != 1 || got[0].Latency != 4*ms || got[1].CID != 2 || got[1].Latency != 6*ms {
		t.Fatalf("samples %+v", got)
	}
	if c := tr.Counters(); c.Completed != 2 || c.Unmatched != 1 || c.DataSuccess != 1 {
		t.Fatalf("counters %+v", c)
	}
	st := tr.TakeStats()[Key{host.Addr(), 5, OpRead}]
	if st.Count != 2 || st.Max != 6*ms || st.Mean() != 5*ms {
		t.Fatalf("stats %+v", st)
	}
}

// Every queue's Connect names its host and subsystem; a connection that
// closes is forgotten; an idle one that sent its Connect is not.
func TestConnections(t *testing.T) {
	tr := NewTracker(Options{}, nil)
	var seen []Connect
	tr.OnConnect(func(_ Flow, c Connect) { seen = append(seen, c) })
	flows := make([]Flow, 3)
	for q := range flows {
		flows[q] = Flow{Initiator: netip.AddrPortFrom(host.Addr(), uint16(51000+q)), Target: ctrl}
		tr.Feed(flows[q], ToTarget, append(icReq.bytes(), connect(uint16(q), "nqn.h3", "nqn.vg1").bytes()...), t0)
	}
	if len(seen) != 3 || len(tr.Connections()) != 3 || tr.Connections()[flows[2]].QID != 2 {
		t.Fatalf("seen %+v, connections %+v", seen, tr.Connections())
	}
	tr.Expire(t0.Add(time.Hour), time.Minute)
	if len(tr.Connections()) != 3 {
		t.Fatal("an idle connected queue was expired")
	}
	tr.Close(flows[0])
	if c := tr.Connections(); len(c) != 2 || c[flows[1]].SubNQN != "nqn.vg1" || c[flows[1]].HostNQN != "nqn.h3" {
		t.Fatalf("after close: %+v", c)
	}
}

// Reassembly is iscsipdu's, which knows nothing of the protocol:
// retransmitted, overlapping and reordered segments reach the tracker as
// one stream.
func TestReassembly(t *testing.T) {
	cmds := append(append(connect(1, "nqn.h", "nqn.s").bytes(), read(1, 1).bytes()...), write(2, 1, 700).bytes()...)
	resps := append(c2h(1, 3000, FlagLast|FlagSuccess).bytes(), resp(2, 0).bytes()...)
	tr := NewTracker(Options{}, nil)
	r := iscsipdu.NewReassembler(tr)
	const isn = 0xfffffff0 // wraps within the stream
	for _, s := range []struct {
		d        Direction
		from, to int
	}{
		{ToTarget, 0, 100}, {ToTarget, 0, 60}, {ToTarget, 500, len(cmds)}, {ToTarget, 100, 600},
		{ToInitiator, 0, 1000}, {ToInitiator, 2000, len(resps)}, {ToInitiator, 900, 2100},
	} {
		b := cmds
		if s.d == ToInitiator {
			b = resps
		}
		r.Segment(flow, s.d, isn+uint32(s.from), b[s.from:s.to], t0)
	}
	if c := tr.Counters(); c.Completed != 2 || c.Connects != 1 || c.Resyncs != 0 || r.Gaps != 0 {
		t.Fatalf("counters %+v, gaps %d", c, r.Gaps)
	}
}

// A long data PDU is skipped, not buffered.
func TestLongDataIsNotBuffered(t *testing.T) {
	tr := NewTracker(Options{}, nil)
	tr.Feed(flow, ToTarget, read(1, 1).bytes(), t0)
	b := c2h(1, 900000, FlagLast|FlagSuccess).bytes()
	for len(b) > 0 {
		k := min(1448, len(b))
		tr.Feed(flow, ToInitiator, b[:k], t0)
		b = b[k:]
		if s := tr.tab.Flows[flow].State.s[ToInitiator]; cap(s.Buf) > bufCap {
			t.Fatalf("buffer grew to %d", cap(s.Buf))
		}
	}
	if c := tr.Counters(); c.Completed != 1 || c.Resyncs != 0 {
		t.Fatalf("%+v", c)
	}
}

func TestExpireAndClose(t *testing.T) {
	_, tr := run(t, Options{}, []seg{{d: ToTarget, pdus: []pdu{read(1, 1), read(2, 1)}}})
	tr.Expire(t0.Add(time.Second), 10*time.Second)
	if tr.tab.Flows[flow].Outstanding() != 2 {
		t.Fatal("expired too early")
	}
	tr.Expire(t0.Add(time.Minute), 10*time.Second)
	if len(tr.tab.Flows) != 0 || tr.Counters().Expired != 2 {
		t.Fatalf("flows %d counters %+v", len(tr.tab.Flows), tr.Counters())
	}
}
