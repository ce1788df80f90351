// Package capture copies the TCP segments of one port off a network
// interface with an AF_PACKET socket: a classic BPF filter in the kernel
// keeps only TCP to or from the port (IPv4, and IPv6 without extension
// headers), each segment carries the kernel's receive timestamp, and the
// decoded segment (addresses, ports, sequence number, flags, payload) is
// handed to a callback. It is bridge mode's eyes (thesis 6.9): on a
// bridge port it sees both directions of every connection that crosses it.
//
// It only reads: it never changes the interface (no promiscuous mode, a
// bridge port already sees everything it forwards) and never delays or
// drops a packet, since a tap socket gets a copy. One buffer is reused for
// every packet, so the payload handed to the callback is valid only during
// the call; the callback must copy what it keeps.
//
// Imports (sanqos): none.
package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Segment is one captured TCP segment.
type Segment struct {
	Src, Dst netip.AddrPort
	Seq      uint32
	Flags    uint8 // TCP flags byte (FIN 0x01, SYN 0x02, RST 0x04)
	Payload  []byte
	Time     time.Time // kernel receive (or transmit) time
}

// TCP flags.
const (
	FIN = 0x01
	SYN = 0x02
	RST = 0x04
)

// Stats are a capture's counters.
type Stats struct {
	Packets   uint64 // segments delivered
	Truncated uint64 // larger than the buffer: delivered cut short (the reassembler sees a hole)
	Malformed uint64
	Drops     uint64 // the kernel's count of packets its socket queue dropped
}

// bufSize holds a GSO super-packet of up to 64 KiB plus headers with room
// for BIG TCP's larger ones.
const bufSize = 256 << 10

// Capture is an open AF_PACKET socket on one interface.
type Capture struct {
	fd      int
	buf     []byte
	oob     []byte
	mu      sync.Mutex
	stats   Stats
	closed  bool
	running bool
	done    chan struct{} // closed when Run has closed the socket
	// Tap, when set before Run, sees every packet the filter passed (from
	// the IP header) before it is decoded, e.g. a PcapWriter's Write.
	Tap func(pkt []byte, ts time.Time)
}

// Filter is the classic BPF program that accepts TCP segments to or from
// any of ports (at least one, at most 100), on a cooked (SOCK_DGRAM)
// socket whose packets start at the IP header.
func Filter(ports ...uint16) ([]bpf.RawInstruction, error) {
	if len(ports) == 0 || len(ports) > 100 {
		return nil, fmt.Errorf("capture filter: %d ports, want 1..100", len(ports))
	}
	n := len(ports)
	reject := 15 + 2*n // the index of RetConstant 0; accept follows
	to := func(from, target int) uint8 { return uint8(target - from - 1) }
	prog := []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 0, Size: 1},
		/* 1 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0},
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x40, SkipFalse: 6}, // → 9 (IPv6?)
		// IPv4: TCP, first fragment only; X = header length.
		/* 3 */ bpf.LoadAbsolute{Off: 9, Size: 1},
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_TCP, SkipFalse: to(4, reject)},
		/* 5 */ bpf.LoadAbsolute{Off: 6, Size: 2},
		/* 6 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: to(6, reject)},
		/* 7 */ bpf.LoadMemShift{Off: 0},
		/* 8 */ bpf.Jump{Skip: 4}, // → 13 (ports)
		// IPv6: next header TCP (no extension headers); X = 40.
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x60, SkipFalse: to(9, reject)},
		/* 10 */ bpf.LoadAbsolute{Off: 6, Size: 1},
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_TCP, SkipFalse: to(11, reject)},
		/* 12 */ bpf.LoadConstant{Dst: bpf.RegX, Val: 40},
	}
	// 13: source port, then destination port, each against every port.
	for _, off := range []uint32{0, 2} {
		prog = append(prog, bpf.LoadIndirect{Off: off, Size: 2})
		for _, p := range ports {
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(p), SkipTrue: to(len(prog), reject+1)})
		}
	}
	prog = append(prog, bpf.RetConstant{Val: 0}, bpf.RetConstant{Val: bufSize})
	return bpf.Assemble(prog)
}

// Open opens a capture of TCP ports on interface ifname, in the network
// namespace of the calling thread.
func Open(ifname string, ports ...uint16) (*Capture, error) {
	raw, err := Filter(ports...)
	if err != nil {
		return nil, err
	}
	return OpenFiltered(ifname, raw)
}

// OpenFiltered opens a capture of what raw (a classic BPF program over
// packets from their IP header) passes on interface ifname, or on every
// interface of the calling thread's network namespace for "".
func OpenFiltered(ifname string, raw []bpf.RawInstruction) (*Capture, error) {
	var index int
	if ifname != "" {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return nil, fmt.Errorf("capture interface: %w", err)
		}
		index = ifi.Index
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket (needs CAP_NET_RAW): %w", err)
	}
	c := &Capture{fd: fd, buf: make([]byte, bufSize), oob: make([]byte, 128), done: make(chan struct{})}
	fail := func(what string, err error) (*Capture, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("capture %s: %w", what, err)
	}
	// Filter before bind, so no unfiltered packet is queued in between.
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		return fail("filter", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("timestamps", err)
	}
	// A few MB of queue rides out a scheduling hiccup at lab rates; what
	// overflows is counted (Stats.Drops) and the reassembler resyncs.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	// Wake up regularly so Run notices Close.
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("timeout", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: index}); err != nil {
		return fail("bind", err)
	}
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Run delivers segments to fn until Close; it returns nil after Close.
// Call it once; it closes the socket when it returns (at once if Close
// came first).
func (c *Capture) Run(fn func(Segment)) error {
	c.mu.Lock()
	if c.closed { // before Run, or after a Run that Close ended
		c.mu.Unlock()
		return nil
	}
	if c.running {
		c.mu.Unlock()
		return errors.New("capture: already running")
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.closed = true
		unix.Close(c.fd)
		c.mu.Unlock()
		close(c.done)
	}()
	for {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return nil
		}
		n, oobn, flags, _, err := unix.Recvmsg(c.fd, c.buf, c.oob, unix.MSG_TRUNC)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("capture: %w", err)
		}
		ts := timestamp(c.oob[:oobn])
		pkt := c.buf[:min(n, len(c.buf))]
		if c.Tap != nil {
			c.Tap(pkt, ts)
		}
		seg, ok := Decode(pkt, ts)
		c.mu.Lock()
		switch {
		case !ok:
			c.stats.Malformed++
		default:
			c.stats.Packets++
			if flags&unix.MSG_TRUNC != 0 || n > len(c.buf) {
				c.stats.Truncated++
			}
		}
		c.mu.Unlock()
		if ok {
			fn(seg)
		}
	}
}

// timestamp is SO_TIMESTAMPNS's control message, or now without one.
func timestamp(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
				sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
				nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
				return time.Unix(sec, nsec)
			}
		}
	}
	return time.Now()
}

// Decode parses an IP packet (starting at the IP header) carrying TCP.
// The payload aliases pkt. ok is false for anything else or a packet too
// short for its headers.
func Decode(pkt []byte, ts time.Time) (s Segment, ok bool) {
	if len(pkt) < 1 {
		return s, false
	}
	var src, dst netip.Addr
	var tcp []byte
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return s, false
		}
		ihl := int(pkt[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(pkt[2:4]))
		if total == 0 { // BIG TCP: the length is the packet's
			total = len(pkt)
		}
		if ihl < 20 || pkt[9] != unix.IPPROTO_TCP || total < ihl || len(pkt) < ihl {
			return s, false
		}
		src, dst = netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20]))
		tcp = pkt[ihl:min(total, len(pkt))]
	case 6:
		if len(pkt) < 40 || pkt[6] != unix.IPPROTO_TCP {
			return s, false
		}
		plen := int(binary.BigEndian.Uint16(pkt[4:6]))
		if plen == 0 { // jumbogram / BIG TCP
			plen = len(pkt) - 40
		}
		src, dst = netip.AddrFrom16([16]byte(pkt[8:24])), netip.AddrFrom16([16]byte(pkt[24:40]))
		tcp = pkt[40:min(40+plen, len(pkt))]
	default:
		return s, false
	}
	if len(tcp) < 20 {
		return s, false
	}
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) {
		return s, false
	}
	s.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(tcp[0:2]))
	s.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(tcp[2:4]))
	s.Seq = binary.BigEndian.Uint32(tcp[4:8])
	s.Flags = tcp[13]
	s.Payload = tcp[off:]
	s.Time = ts
	return s, true
}

// Stats returns the counters, with the kernel's drop count so far.
func (c *Capture) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		if ps, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			c.stats.Drops += uint64(ps.Drops) // the kernel resets them on read
		}
	}
	return c.stats
}

// Close stops Run (within its 100 ms wake-up), waits for it and closes
// the socket. Run owns the descriptor while it runs, so a Recvmsg in
// progress never reads a closed (and possibly reused) descriptor.
func (c *Capture) Close() error {
	c.mu.Lock()
	if c.closed && !c.running {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	running := c.running
	if !running {
		unix.Close(c.fd)
	}
	c.mu.Unlock()
	if running {
		<-c.done
	}
	return nil
}
