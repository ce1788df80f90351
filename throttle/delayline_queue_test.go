package throttle

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
)

// tcp4 builds an IPv4+TCP header (options of optLen bytes) followed by
// payload bytes; only the fields classifyPacket reads are meaningful.
func tcp4(flags byte, optLen, payload int) []byte {
	ihl, doff := 20, 20+optLen
	b := make([]byte, ihl+doff+payload)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[9] = 6
	copy(b[16:20], []byte{10, 0, 0, 2})
	b[ihl+12] = byte(doff/4) << 4
	b[ihl+13] = flags
	return b
}

func tcp6(flags byte, optLen, payload int) []byte {
	doff := 20 + optLen
	b := make([]byte, 40+doff+payload)
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(doff+payload))
	b[6] = 6
	b[39] = 2 // ::2
	b[40+12] = byte(doff/4) << 4
	b[40+13] = flags
	return b
}

func TestClassifyPacket(t *testing.T) {
	const fin, syn, rst, psh, ack, ece = 0x01, 0x02, 0x04, 0x08, 0x10, 0x40
	v4 := netip.MustParseAddr("10.0.0.2")
	v6 := netip.MustParseAddr("::2")
	frag := tcp4(ack, 0, 0)
	frag[6] = 0x20 // MF
	ext := tcp6(ack, 0, 0)
	ext[6] = 0 // hop-by-hop header first
	bigTCP := tcp4(ack, 0, 0)
	bigTCP[2], bigTCP[3] = 0, 0
	truncated := tcp4(ack, 12, 1400)[:128] // what a 128-byte copy range gives
	cases := []struct {
		name string
		pkt  []byte
		dst  netip.Addr
		want pktKind
	}{
		{"v4 pure ack", tcp4(ack, 0, 0), v4, kindAck},
		{"v4 ack with timestamps+sack", tcp4(ack|ece, 32, 0), v4, kindAck},
		{"v4 data", tcp4(ack|psh, 12, 1), v4, kindData},
		{"v4 data truncated by copy range", truncated, v4, kindData},
		{"v4 syn-ack", tcp4(syn|ack, 20, 0), v4, kindSynAck},
		{"v4 fin", tcp4(fin|ack, 12, 0), v4, kindData},
		{"v4 rst", tcp4(rst|ack, 0, 0), v4, kindData},
		{"v4 no ack flag", tcp4(0, 0, 0), v4, kindData},
		{"v4 fragment", frag, v4, kindData},
		{"v4 BIG TCP zero length", bigTCP, v4, kindData},
		{"v6 pure ack", tcp6(ack, 12, 0), v6, kindAck},
		{"v6 data", tcp6(ack, 12, 100), v6, kindData},
		{"v6 extension header", ext, v6, kindData},
		{"v6 syn", tcp6(syn, 20, 0), v6, kindData},
		{"short v4", tcp4(ack, 0, 0)[:19], netip.Addr{}, kindUnknown},
		{"short v6", tcp6(ack, 0, 0)[:39], netip.Addr{}, kindUnknown},
		{"empty", nil, netip.Addr{}, kindUnknown},
		{"not ip", []byte{0x11, 0, 0, 0}, netip.Addr{}, kindUnknown},
	}
	for _, c := range cases {
		dst, _, kind := classifyPacket(c.pkt)
		if dst != c.dst || kind != c.want {
			t.Errorf("%s: got %v kind %d, want %v kind %d", c.name, dst, kind, c.dst, c.want)
		}
	}
}

func TestDelayQueueOrderAndTiming(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	b := netip.MustParseAddr("10.0.0.2")
	q := newDelayQueue()
	const ms = int64(1e6)
	// a: data with a 20 ms read delay, then an ACK with a 1 ms write delay
	// that must not overtake it.
	if due := q.push(netip.AddrPortFrom(a, 40000), 1, 0+20*ms); due != 20*ms {
		t.Fatalf("due %d", due)
	}
	if due := q.push(netip.AddrPortFrom(a, 40000), 2, 1*ms+1*ms); due != 20*ms {
		t.Fatalf("later packet would overtake: due %d, want %d", due, 20*ms)
	}
	q.push(netip.AddrPortFrom(b, 40000), 3, 2*ms+500_000) // b: 0.5 ms
	q.push(netip.AddrPortFrom(a, 40000), 4, 25*ms)
	q.push(netip.AddrPortFrom(b, 40000), 5, 3*ms)
	if n, ok := q.next(); !ok || n != 2*ms+500_000 {
		t.Fatalf("next %d %v", n, ok)
	}
	var lates []int64
	late := func(l int64) { lates = append(lates, l) }
	if got := q.popDue(2*ms+499_999, nil, late); len(got) != 0 {
		t.Fatalf("released early: %v", got)
	}
	if got := q.popDue(3*ms, nil, late); !slices.Equal(got, []uint32{3, 5}) {
		t.Fatalf("at 3 ms got %v", got)
	}
	if !slices.Equal(lates, []int64{500_000, 0}) {
		t.Fatalf("lateness %v", lates)
	}
	if q.holds(b) || q.len() != 3 {
		t.Fatalf("b still held or len %d", q.len())
	}
	if got := q.popDue(20*ms, nil, nil); !slices.Equal(got, []uint32{1, 2}) {
		t.Fatalf("at 20 ms got %v", got)
	}
	q.push(netip.AddrPortFrom(b, 40000), 6, 30*ms)
	if got := q.drainAll(nil); !slices.Equal(got, []uint32{4, 6}) && !slices.Equal(got, []uint32{6, 4}) {
		t.Fatalf("drainAll %v", got)
	}
	if q.len() != 0 || q.holds(a) || len(q.h) != 0 {
		t.Fatal("queue not empty after drainAll")
	}
	if _, ok := q.next(); ok {
		t.Fatal("next on empty queue")
	}
}

// TestDelayQueueManyConsumers checks global due order and per-consumer
// FIFO order with interleaved consumers and compaction of long FIFOs.
func TestDelayQueueManyConsumers(t *testing.T) {
	q := newDelayQueue()
	var addrs []netip.Addr
	for i := range 50 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i)}))
	}
	id := uint32(0)
	owner := map[uint32]int{}
	for step := range 2000 {
		c := (step * 7) % len(addrs)
		id++
		owner[id] = c
		q.push(netip.AddrPortFrom(addrs[c], 40000), id, int64(step)+int64(c%5)*1000)
	}
	last := map[int]uint32{}
	released := 0
	for now := int64(0); q.len() > 0; now += 37 {
		for _, id := range q.popDue(now, nil, func(l int64) {
			if l < 0 || l >= 37 {
				t.Fatalf("lateness %d outside one step", l)
			}
		}) {
			c := owner[id]
			if id <= last[c] {
				t.Fatalf("consumer %d: id %d after %d", c, id, last[c])
			}
			last[c] = id
			released++
		}
	}
	if released != 2000 {
		t.Fatalf("released %d", released)
	}
}

// At the queue limit the delay line releases the packet due soonest early
// (popEarliest): every consumer's packets must still leave in arrival order.
func TestDelayQueuePopEarliestKeepsOrder(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	b := netip.MustParseAddr("10.0.0.2")
	q := newDelayQueue()
	q.push(netip.AddrPortFrom(a, 40000), 1, 50)
	q.push(netip.AddrPortFrom(b, 40000), 2, 10)
	q.push(netip.AddrPortFrom(a, 40000), 3, 5) // waits behind 1: due 50
	q.push(netip.AddrPortFrom(b, 40000), 4, 60)
	var got []uint32
	var owners []netip.Addr
	for {
		id, addr, ok := q.popEarliest()
		if !ok {
			break
		}
		got, owners = append(got, id), append(owners, addr)
	}
	// Heads by due: b's 2 (10), then a's 1 (50), a's 3 (50), b's 4 (60).
	if want := []uint32{2, 1, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("popEarliest order %v, want %v", got, want)
	}
	if !slices.Equal(owners, []netip.Addr{b, a, a, b}) {
		t.Fatalf("owners %v", owners)
	}
	if q.len() != 0 || q.holds(a) || q.holds(b) {
		t.Fatal("queue not empty")
	}
}

// Flows of one consumer are separate FIFOs: a new connection is not held
// behind the delay of its older ones; draining the consumer takes all.
func TestDelayQueuePerFlow(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	old, fresh := netip.AddrPortFrom(a, 40000), netip.AddrPortFrom(a, 40002)
	q := newDelayQueue()
	q.push(old, 1, 20)
	if due := q.push(fresh, 2, 1); due != 1 {
		t.Fatalf("new flow's packet due %d: held behind the old flow", due)
	}
	if got := q.popDue(1, nil, nil); !slices.Equal(got, []uint32{2}) || !q.holds(a) {
		t.Fatalf("at 1: %v, holds %v", got, q.holds(a))
	}
	q.push(fresh, 3, 30)
	got := q.drain(a, nil)
	slices.Sort(got)
	if !slices.Equal(got, []uint32{1, 3}) || q.holds(a) || q.len() != 0 || len(q.h) != 0 {
		t.Fatalf("drain %v, holds %v, len %d", got, q.holds(a), q.len())
	}
}

func TestClassifyPacketPort(t *testing.T) {
	p := tcp4(0x10, 0, 0)
	binary.BigEndian.PutUint16(p[22:], 40123) // TCP destination port
	if dst, port, kind := classifyPacket(p); port != 40123 || kind != kindAck || !dst.IsValid() {
		t.Fatalf("got %v port %d kind %d", dst, port, kind)
	}
	if _, port, _ := classifyPacket(p[:22]); port != 0 {
		t.Fatalf("truncated TCP header gave port %d", port)
	}
}
