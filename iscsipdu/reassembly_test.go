package iscsipdu

import (
	"testing"
	"time"
)

// tcpSeg is one captured segment: direction, sequence offset from the
// stream's start, and the bytes [from, to) of that direction's stream.
type tcpSeg struct {
	d        Direction
	from, to int
}

func TestReassembly(t *testing.T) {
	ms := time.Millisecond
	cmds := append(append(read10(1, 1).bytes(Digests{}), write10(2, 1, 700).bytes(Digests{})...), read10(3, 1).bytes(Digests{})...)
	resps := append(append(dataIn(1, 3000, true).bytes(Digests{}), resp(2, 0).bytes(Digests{})...), dataIn(3, 100, true).bytes(Digests{})...)
	const isn = 0xfffffff0 // wraps within the stream
	for _, tc := range []struct {
		name      string
		segs      []tcpSeg
		completed int
		gaps      int
	}{
		{"in order", []tcpSeg{{ToTarget, 0, len(cmds)}, {ToInitiator, 0, len(resps)}}, 3, 0},
		{"retransmissions and overlaps", []tcpSeg{
			{ToTarget, 0, 60}, {ToTarget, 0, 60}, {ToTarget, 40, 500}, {ToTarget, 100, len(cmds)},
			{ToInitiator, 0, 1000}, {ToInitiator, 500, len(resps)}, {ToInitiator, 0, len(resps)},
		}, 3, 0},
		{"reordered", []tcpSeg{
			{ToTarget, 0, 100}, {ToTarget, 300, len(cmds)}, {ToTarget, 100, 300},
			{ToInitiator, 0, 500}, {ToInitiator, 2000, len(resps)}, {ToInitiator, 1000, 2000}, {ToInitiator, 500, 1000},
		}, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(Options{}, nil)
			r := NewReassembler(tr)
			for i, s := range tc.segs {
				b := cmds
				if s.d == ToInitiator {
					b = resps
				}
				r.Segment(flow, s.d, isn+uint32(s.from), b[s.from:s.to], t0.Add(time.Duration(i)*ms))
			}
			if c := tr.Counters(); c.Completed != tc.completed || r.Gaps != tc.gaps || c.Resyncs != 0 {
				t.Fatalf("counters %+v, gaps %d", c, r.Gaps)
			}
		})
	}
}

// A hole that never fills is given up on: the stream resynchronises and
// later PDUs are matched again.
func TestReassemblyGap(t *testing.T) {
	tr := NewTracker(Options{}, nil)
	r := NewReassembler(tr)
	first := append(read10(1, 1).bytes(Digests{}), dataOut(9, 5000).bytes(Digests{})...)
	r.Segment(flow, ToTarget, 0, first[:100], t0) // the rest of the Data-Out is lost
	seq := uint32(len(first))
	for i := 0; i <= maxOutOfOrder; i++ { // then commands keep coming
		p := read10(uint32(100+i), 2).bytes(Digests{})
		r.Segment(flow, ToTarget, seq, p, t0)
		seq += uint32(len(p))
	}
	if r.Gaps != 1 {
		t.Fatalf("gaps %d", r.Gaps)
	}
	for i := 0; i <= maxOutOfOrder; i++ {
		tr.Feed(flow, ToInitiator, resp(uint32(100+i), 0).bytes(Digests{}), t0.Add(time.Millisecond))
	}
	if c := tr.Counters(); c.Completed != maxOutOfOrder+1 {
		t.Fatalf("after the gap: %+v", c)
	}
}
