package iscsipdu

import (
	"sort"
	"time"
)

// Gapper is a Feeder that can be told bytes of a stream were lost, so it
// stops trusting its position in the stream and resynchronises.
type Gapper interface {
	Feeder
	Gap(f Flow, d Direction)
}

// Gap tells the tracker that bytes of f's direction d were never seen (a
// capture drop): the stream drops its partial header and data-skip count
// and looks for the next header. Outstanding commands stay: their
// responses may still come.
func (t *Tracker) Gap(f Flow, d Direction) {
	if c := t.tab.Flows[f]; c != nil {
		c.State[d].Gap()
	}
}

// Reassembly limits: a capture sees segments out of order only briefly
// (a retransmission, a reordering on a bonded link); anything that stays
// out of order longer is a drop.
const (
	maxOutOfOrder      = 32
	maxOutOfOrderBytes = 256 << 10
	// maxReassemblyStreams matches the tracker's default flow cap (two
	// directions each).
	maxReassemblyStreams = 2 * 65536
)

type held struct {
	seq     uint32
	payload []byte
	ts      time.Time
}

type dirState struct {
	next    uint32
	started bool
	ooo     []held
	oooB    int
}

type flowDir struct {
	f Flow
	d Direction
}

// Reassembler puts captured TCP segments back into stream order for a
// Gapper: it drops retransmitted bytes, trims overlaps, holds a few
// out-of-order segments until the hole fills, and reports a gap when it
// does not. It is what a bridge-mode capture loop (AF_PACKET, NFLOG) calls
// per packet; it knows nothing of iSCSI.
type Reassembler struct {
	out   Gapper
	state map[flowDir]*dirState
	// Gaps counts holes given up on.
	Gaps int
}

// NewReassembler feeds out.
func NewReassembler(out Gapper) *Reassembler {
	return &Reassembler{out: out, state: map[flowDir]*dirState{}}
}

// before reports whether sequence number a is before b, modulo 2^32.
func before(a, b uint32) bool { return int32(a-b) < 0 }

// Segment takes one captured segment's sequence number and payload.
func (r *Reassembler) Segment(f Flow, d Direction, seq uint32, payload []byte, ts time.Time) {
	if len(payload) == 0 {
		return
	}
	k := flowDir{f, d}
	st := r.state[k]
	if st == nil {
		if len(r.state) >= maxReassemblyStreams {
			return // bounded: the tracker would refuse the flow anyway
		}
		st = &dirState{}
		r.state[k] = st
	}
	if !st.started {
		st.started, st.next = true, seq
	}
	r.accept(f, d, st, seq, payload, ts)
	// Release held segments that are now in order.
	for len(st.ooo) > 0 && !before(st.next, st.ooo[0].seq) {
		h := st.ooo[0]
		st.ooo = st.ooo[1:]
		st.oooB -= len(h.payload)
		r.accept(f, d, st, h.seq, h.payload, h.ts)
	}
	if len(st.ooo) > maxOutOfOrder || st.oooB > maxOutOfOrderBytes {
		// The hole will not fill: skip to the first held segment.
		r.Gaps++
		r.out.Gap(f, d)
		st.next = st.ooo[0].seq
		for len(st.ooo) > 0 && !before(st.next, st.ooo[0].seq) {
			h := st.ooo[0]
			st.ooo = st.ooo[1:]
			st.oooB -= len(h.payload)
			r.accept(f, d, st, h.seq, h.payload, h.ts)
		}
	}
}

// accept feeds the part of a segment at or after next, or holds it when
// it starts beyond next.
func (r *Reassembler) accept(f Flow, d Direction, st *dirState, seq uint32, p []byte, ts time.Time) {
	end := seq + uint32(len(p))
	switch {
	case !before(st.next, end): // entirely seen already (retransmission)
		return
	case before(st.next, seq): // a hole before it: hold a copy
		cp := append([]byte(nil), p...)
		i := sort.Search(len(st.ooo), func(i int) bool { return !before(st.ooo[i].seq, seq) })
		st.ooo = append(st.ooo, held{})
		copy(st.ooo[i+1:], st.ooo[i:])
		st.ooo[i] = held{seq: seq, payload: cp, ts: ts}
		st.oooB += len(cp)
		return
	}
	p = p[st.next-seq:] // trim what was seen
	r.out.Feed(f, d, p, ts)
	st.next = end
}

// Close forgets a connection's reassembly state (FIN or RST).
func (r *Reassembler) Close(f Flow) {
	delete(r.state, flowDir{f, ToTarget})
	delete(r.state, flowDir{f, ToInitiator})
}
