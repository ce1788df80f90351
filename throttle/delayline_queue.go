package throttle

import (
	"container/heap"
	"encoding/binary"
	"net/netip"
)

// This file holds the clock-free parts of the delay line: packet
// classification and the per-flow FIFOs. Times are int64 nanoseconds on
// whatever clock the caller uses, so tests drive them by hand.

// pktKind says which of a consumer's delays a packet gets.
type pktKind uint8

const (
	kindData    pktKind = iota // payload or anything not a pure ACK: read delay
	kindAck                    // pure ACK: write delay
	kindUnknown                // not parseable: accepted undelayed
	kindSynAck                 // a connection's SYN-ACK: the larger delay (follow.go)
)

// classifyPacket reads the destination, its TCP port (0 if not TCP or not
// readable: such packets share one FIFO per consumer) and the kind from
// the first bytes of a network-layer packet. A pure ACK is TCP with ACK set, none of SYN, FIN,
// RST, and a known payload length of zero; anything doubtful (IPv6
// extension headers, fragments, BIG TCP's zero length field) counts as data,
// because delaying an ACK by the read delay is the smaller mistake.
func classifyPacket(b []byte) (dst netip.Addr, port uint16, kind pktKind) {
	if len(b) < 1 {
		return netip.Addr{}, 0, kindUnknown
	}
	var l4 []byte
	var l4len int // TCP header + payload, -1 if unknown
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return netip.Addr{}, 0, kindUnknown
		}
		dst = netip.AddrFrom4([4]byte(b[16:20]))
		ihl := int(b[0]&0x0f) * 4
		if b[9] != 6 || ihl < 20 || binary.BigEndian.Uint16(b[6:])&0x3fff != 0 {
			return dst, 0, kindData // not TCP, or a fragment
		}
		tot := int(binary.BigEndian.Uint16(b[2:]))
		if tot == 0 || len(b) < ihl {
			return dst, 0, kindData
		}
		l4, l4len = b[ihl:], tot-ihl
	case 6:
		if len(b) < 40 {
			return netip.Addr{}, 0, kindUnknown
		}
		dst = netip.AddrFrom16([16]byte(b[24:40]))
		if b[6] != 6 {
			return dst, 0, kindData // extension headers or not TCP
		}
		plen := int(binary.BigEndian.Uint16(b[4:]))
		if plen == 0 {
			return dst, 0, kindData // jumbogram
		}
		l4, l4len = b[40:], plen
	default:
		return netip.Addr{}, 0, kindUnknown
	}
	if len(l4) < 4 {
		return dst, 0, kindData
	}
	port = binary.BigEndian.Uint16(l4[2:])
	if len(l4) < 14 {
		return dst, port, kindData
	}
	doff := int(l4[12]>>4) * 4
	flags := l4[13]
	const fin, syn, rst, ack = 0x01, 0x02, 0x04, 0x10
	if flags&ack != 0 && flags&(syn|fin|rst) == 0 && doff >= 20 && l4len == doff {
		return dst, port, kindAck
	}
	if flags&(syn|ack|fin|rst) == syn|ack {
		return dst, port, kindSynAck
	}
	return dst, port, kindData
}

// tcpAckNumber is a TCP segment's acknowledgement number, 0 if b is not an
// unfragmented TCP segment long enough to carry one.
func tcpAckNumber(b []byte) uint32 {
	if len(b) < 1 {
		return 0
	}
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if len(b) < 20 || b[9] != 6 || ihl < 20 || len(b) < ihl {
			return 0
		}
		l4 = b[ihl:]
	case 6:
		if len(b) < 40 || b[6] != 6 {
			return 0
		}
		l4 = b[40:]
	}
	if len(l4) < 12 {
		return 0
	}
	return binary.BigEndian.Uint32(l4[8:])
}

type heldPkt struct {
	id  uint32
	due int64
}

// fifo holds one flow's packets (a consumer's address and port) in
// arrival order. Due times never decrease along it (push enforces that),
// so releasing from the head only keeps the flow in order; the price is
// that a short-delay packet behind a long-delay one of the same flow (an
// ACK behind data) waits for it. FIFOs are per flow, not per consumer, so
// a consumer's new connection is not held behind its old ones' delay
// while its own delay rises (follow.go).
type fifo struct {
	key  netip.AddrPort
	pkts []heldPkt
	head int
	idx  int // position in the heap
}

func (f *fifo) len() int { return len(f.pkts) - f.head }

type fifoHeap []*fifo

func (h fifoHeap) Len() int           { return len(h) }
func (h fifoHeap) Less(i, j int) bool { return h[i].pkts[h[i].head].due < h[j].pkts[h[j].head].due }
func (h fifoHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *fifoHeap) Push(x any)        { f := x.(*fifo); f.idx = len(*h); *h = append(*h, f) }
func (h *fifoHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return f
}

// delayQueue is every held packet: a FIFO per flow, indexed by consumer,
// and a heap of the non-empty FIFOs ordered by their head's due time.
type delayQueue struct {
	byAddr map[netip.Addr]map[uint16]*fifo
	h      fifoHeap
	n      int
}

func newDelayQueue() *delayQueue { return &delayQueue{byAddr: map[netip.Addr]map[uint16]*fifo{}} }

func (q *delayQueue) len() int { return q.n }

// holds says whether any of consumer a's flows has packets held.
func (q *delayQueue) holds(a netip.Addr) bool { return len(q.byAddr[a]) > 0 }

func (q *delayQueue) forget(f *fifo) {
	a := f.key.Addr()
	delete(q.byAddr[a], f.key.Port())
	if len(q.byAddr[a]) == 0 {
		delete(q.byAddr, a)
	}
}

// push holds packet id of flow k until due, or until the packet ahead of
// it in k's FIFO leaves if that is later. It returns the due time used.
func (q *delayQueue) push(k netip.AddrPort, id uint32, due int64) int64 {
	f := q.byAddr[k.Addr()][k.Port()]
	if f == nil {
		f = &fifo{key: k}
		if q.byAddr[k.Addr()] == nil {
			q.byAddr[k.Addr()] = map[uint16]*fifo{}
		}
		q.byAddr[k.Addr()][k.Port()] = f
		f.pkts = append(f.pkts, heldPkt{id, due})
		heap.Push(&q.h, f)
		q.n++
		return due
	}
	if tail := f.pkts[len(f.pkts)-1].due; tail > due {
		due = tail
	}
	f.pkts = append(f.pkts, heldPkt{id, due})
	q.n++
	return due
}

// next is the earliest due time held.
func (q *delayQueue) next() (int64, bool) {
	if len(q.h) == 0 {
		return 0, false
	}
	f := q.h[0]
	return f.pkts[f.head].due, true
}

// popDue appends to out, in due order, every packet due at or before now;
// late is called with how late each one leaves.
func (q *delayQueue) popDue(now int64, out []uint32, late func(int64)) []uint32 {
	for len(q.h) > 0 {
		f := q.h[0]
		p := f.pkts[f.head]
		if p.due > now {
			break
		}
		out = append(out, p.id)
		if late != nil {
			late(now - p.due)
		}
		f.head++
		q.n--
		if f.len() == 0 {
			heap.Pop(&q.h)
			q.forget(f)
			continue
		}
		if f.head > 64 && f.head*2 > len(f.pkts) {
			f.pkts = append(f.pkts[:0], f.pkts[f.head:]...)
			f.head = 0
		}
		heap.Fix(&q.h, 0)
	}
	return out
}

// popEarliest removes and returns the held packet due soonest, and its
// consumer. It is the head of its flow's FIFO, so releasing it early
// keeps that flow's packets in order.
func (q *delayQueue) popEarliest() (uint32, netip.Addr, bool) {
	if len(q.h) == 0 {
		return 0, netip.Addr{}, false
	}
	f := q.h[0]
	id := f.pkts[f.head].id
	f.head++
	q.n--
	if f.len() == 0 {
		heap.Pop(&q.h)
		q.forget(f)
	} else {
		heap.Fix(&q.h, 0)
	}
	return id, f.key.Addr(), true
}

// drain appends consumer a's packets to out, each flow's in order, and
// forgets them.
func (q *delayQueue) drain(a netip.Addr, out []uint32) []uint32 {
	for _, f := range q.byAddr[a] {
		for _, p := range f.pkts[f.head:] {
			out = append(out, p.id)
		}
		q.n -= f.len()
		heap.Remove(&q.h, f.idx)
	}
	delete(q.byAddr, a)
	return out
}

// drainAll appends every held packet to out, each flow's in order.
func (q *delayQueue) drainAll(out []uint32) []uint32 {
	for len(q.h) > 0 {
		out = q.drain(q.h[0].key.Addr(), out)
	}
	return out
}
