package sample

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Why exact lookups: a sock_diag dump walks the kernel's whole TCP
// established hash, whatever it matches, and that table is sized by
// memory, not by connections (262,144 buckets on the lab machine: about
// 330 µs per address family, 0.7 % of a core at 10 Hz for two). Asking
// for known connections by 4-tuple and cookie is one hash lookup each.
// TCPRates dumps once per fullEvery samples (to see new connections) and
// looks up the known ones in between; any failed lookup (a connection
// gone) falls back to a dump at once.

// fullEvery is how many samples pass between dumps.
const fullEvery = 10

// diagID is one connection as inet_diag names it: family and the raw
// struct inet_diag_sockid (ports, addresses, interface, cookie).
type diagID struct {
	family uint8
	id     [48]byte
}

// idOfReply is the id of the socket an inet_diag_msg describes (at least
// inetDiagMsgLen bytes): what the kernel says, byte for byte.
func idOfReply(b []byte) diagID {
	d := diagID{family: b[0]}
	copy(d.id[:], b[4:52])
	return d
}

// connSample is one connection's TCP_INFO from either path. An exact
// lookup fills only the fields Sample reads (parseDiagReply).
type connSample struct {
	key connKey
	ti  netlink.TCPInfo
}

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	inetDiagInfo     = 2  // INET_DIAG_INFO
	inetDiagMsgLen   = 72 // struct inet_diag_msg
)

// appendRequest appends the exact lookup of d as a whole netlink message:
// header, then an inet_diag_req_v2 asking for TCP_INFO.
func (d diagID) appendRequest(b []byte, seq uint32) []byte {
	const l = nlmsgHdrLen + 56
	b = binary.NativeEndian.AppendUint32(b, l)
	b = binary.NativeEndian.AppendUint16(b, sockDiagByFamily)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // to the kernel
	b = append(b, d.family, syscall.IPPROTO_TCP, 1<<(inetDiagInfo-1), 0)
	b = binary.NativeEndian.AppendUint32(b, ^uint32(0)) // states: any
	return append(b, d.id[:]...)
}

// parseDiagReply reads an inet_diag_msg with its INET_DIAG_INFO.
func parseDiagReply(b []byte) (connSample, error) {
	if len(b) < inetDiagMsgLen {
		return connSample{}, fmt.Errorf("inet_diag reply of %d bytes", len(b))
	}
	// A closing connection still answers by cookie; the dump would skip
	// it, so the lookup fails and the caller dumps to see it go.
	if b[1] != tcpEstablished {
		return connSample{}, fmt.Errorf("connection in TCP state %d, not established", b[1])
	}
	fam := b[0]
	id := b[4:52]
	var ip netip.Addr
	if fam == syscall.AF_INET {
		ip = netip.AddrFrom4([4]byte(id[20:24]))
	} else {
		ip = netip.AddrFrom16([16]byte(id[20:36])).Unmap()
	}
	s := connSample{key: connKey{
		cookie: uint64(binary.NativeEndian.Uint32(id[40:])) | uint64(binary.NativeEndian.Uint32(id[44:]))<<32,
		peer:   netip.AddrPortFrom(ip, binary.BigEndian.Uint16(id[2:])),
	}}
	for a := b[inetDiagMsgLen:]; len(a) >= 4; {
		l := int(binary.NativeEndian.Uint16(a))
		if l < 4 || l > len(a) {
			break
		}
		if binary.NativeEndian.Uint16(a[2:]) == inetDiagInfo {
			ti := a[4:l]
			// Offsets in struct tcp_info (linux/tcp.h); delivery_rate, the
			// last field read, has been there since Linux 4.9.
			if len(ti) < 168 {
				return connSample{}, fmt.Errorf("tcp_info of %d bytes, want ≥ 168 (delivery_rate)", len(ti))
			}
			u32 := func(off int) uint32 { return binary.NativeEndian.Uint32(ti[off:]) }
			s.ti.Snd_mss = u32(16)
			s.ti.Unacked = u32(24)
			s.ti.Rtt = u32(68)
			s.ti.Rttvar = u32(72)
			s.ti.Bytes_acked = binary.NativeEndian.Uint64(ti[120:])
			s.ti.Bytes_received = binary.NativeEndian.Uint64(ti[128:])
			s.ti.Min_rtt = u32(148)
			s.ti.Data_segs_in = u32(152)
			s.ti.Data_segs_out = u32(156)
			s.ti.Delivery_rate = binary.NativeEndian.Uint64(ti[160:])
			return s, nil
		}
		a = a[(l+3)&^3:]
	}
	return connSample{}, errors.New("inet_diag reply without INET_DIAG_INFO")
}

// exactDiag looks connections up over one long-lived NETLINK_SOCK_DIAG
// socket driven by plain non-blocking syscalls. The kernel answers
// sock_diag requests inside the send that carries them (sock_diag_rcv runs
// in the sender's context and queues each reply on this socket before the
// send returns), so after a send every reply is already waiting: they are
// read without blocking, and a missing one is an error, never a wait.
//
// Why not mdlayher/netlink, which this used before: its socket goes
// through the runtime poller and starts a cancellation-watcher goroutine
// for every send and every receive, and peeks before each receive. In the
// lab's profile of the control loop that bookkeeping (goroutines, thread
// wake-ups, extra syscalls) cost three times the kernel's lookups.
type exactDiag struct {
	fd   int // valid while open
	open bool
	req  []byte       // requests of one batch, reused
	buf  []byte       // receive buffer, reused
	out  []connSample // the last lookup's result, reused (see lookup)
}

// diagBatch bounds the requests sent at once, so that their replies
// (under 1 KiB of receive buffer each) fit the socket's default receive
// buffer (~208 KiB) and none is dropped.
const diagBatch = 64

// diagRecvBuf holds any one netlink datagram: the kernel sizes dump
// datagrams at most to 32 KiB, an exact reply is under 1 KiB.
const diagRecvBuf = 64 << 10

// nlmsgHdrLen is sizeof(struct nlmsghdr).
const nlmsgHdrLen = 16

func (e *exactDiag) dial() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag socket: %w", err)
	}
	e.fd, e.open = fd, true
	if e.buf == nil {
		e.buf = make([]byte, diagRecvBuf)
	}
	return nil
}

// lookup asks for each connection's TCP_INFO by its id. Any failure (a
// connection gone answers ENOENT) drops the socket with whatever replies
// it still holds and returns the error; the caller then dumps. The
// result is valid until the next lookup: TCPRates.Sample reads it and
// lets it go within the same call.
func (e *exactDiag) lookup(ids []diagID) ([]connSample, error) {
	if !e.open {
		if err := e.dial(); err != nil {
			return nil, err
		}
	}
	e.out = e.out[:0]
	for len(ids) > 0 {
		batch := ids[:min(len(ids), diagBatch)]
		ids = ids[len(batch):]
		e.req = e.req[:0]
		for i, d := range batch {
			e.req = d.appendRequest(e.req, uint32(i+1))
		}
		if _, err := rawWrite(e.fd, e.req); err != nil {
			e.close()
			return nil, fmt.Errorf("sock_diag send: %w", err)
		}
		for got := 0; got < len(batch); {
			n, err := rawRead(e.fd, e.buf)
			if err != nil {
				e.close()
				if err == unix.EAGAIN {
					return nil, fmt.Errorf("sock_diag: %d of %d replies", got, len(batch))
				}
				return nil, fmt.Errorf("sock_diag receive: %w", err)
			}
			for m := e.buf[:n]; len(m) >= nlmsgHdrLen; {
				l := int(binary.NativeEndian.Uint32(m))
				if l < nlmsgHdrLen || l > len(m) {
					e.close()
					return nil, fmt.Errorf("sock_diag: netlink message of %d bytes in %d", l, len(m))
				}
				typ, data := binary.NativeEndian.Uint16(m[4:]), m[nlmsgHdrLen:l]
				m = m[min((l+3)&^3, len(m)):]
				switch typ {
				case sockDiagByFamily:
				case unix.NLMSG_ERROR:
					e.close()
					if len(data) >= 4 {
						if code := int32(binary.NativeEndian.Uint32(data)); code < 0 {
							return nil, fmt.Errorf("sock_diag lookup: %w", unix.Errno(-code))
						}
					}
					return nil, errors.New("sock_diag lookup: unexpected acknowledgement")
				default:
					e.close()
					return nil, fmt.Errorf("sock_diag: unexpected netlink message type %d", typ)
				}
				s, err := parseDiagReply(data)
				if err != nil {
					e.close()
					return nil, err
				}
				e.out = append(e.out, s)
				got++
			}
		}
	}
	return e.out, nil
}

// dump asks for every established TCP socket of family and hands each
// reply (an inet_diag_msg with its INET_DIAG_INFO) to each, which must
// not keep it. The kernel walks its whole established hash for this
// (see fullEvery); filtering by state there spares building replies for
// listening and closing sockets, which the caller skips anyway.
func (e *exactDiag) dump(fam uint8, each func(reply []byte)) error {
	if !e.open {
		if err := e.dial(); err != nil {
			return err
		}
	}
	e.req = binary.NativeEndian.AppendUint32(e.req[:0], nlmsgHdrLen+56)
	e.req = binary.NativeEndian.AppendUint16(e.req, sockDiagByFamily)
	e.req = binary.NativeEndian.AppendUint16(e.req, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	e.req = binary.NativeEndian.AppendUint32(e.req, 1)
	e.req = binary.NativeEndian.AppendUint32(e.req, 0)
	e.req = append(e.req, fam, syscall.IPPROTO_TCP, 1<<(inetDiagInfo-1), 0)
	e.req = binary.NativeEndian.AppendUint32(e.req, 1<<tcpEstablished)
	e.req = append(e.req, make([]byte, 48)...) // any socket
	if _, err := rawWrite(e.fd, e.req); err != nil {
		e.close()
		return fmt.Errorf("sock_diag dump: %w", err)
	}
	fail := func(err error) error {
		e.close()
		return err
	}
	for {
		// The kernel queues the dump's next part while handing over the
		// last one (netlink_recvmsg), so a read rarely finds nothing;
		// should it, wait for the part rather than lose the dump.
		n, err := rawRead(e.fd, e.buf)
		if err == unix.EAGAIN {
			fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
			if k, perr := unix.Poll(fds, 1000); perr != nil || k == 0 {
				return fail(errors.New("sock_diag dump: no reply within 1 s"))
			}
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("sock_diag dump: %w", err))
		}
		for m := e.buf[:n]; len(m) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(m))
			if l < nlmsgHdrLen || l > len(m) {
				return fail(fmt.Errorf("sock_diag dump: netlink message of %d bytes in %d", l, len(m)))
			}
			typ, flags, data := binary.NativeEndian.Uint16(m[4:]), binary.NativeEndian.Uint16(m[6:]), m[nlmsgHdrLen:l]
			m = m[min((l+3)&^3, len(m)):]
			if flags&unix.NLM_F_DUMP_INTR != 0 {
				return fail(errors.New("sock_diag dump interrupted: results may be inconsistent"))
			}
			switch typ {
			case sockDiagByFamily:
				each(data)
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				var code int32
				if len(data) >= 4 {
					code = int32(binary.NativeEndian.Uint32(data))
				}
				if code < 0 {
					return fail(fmt.Errorf("sock_diag dump: %w", unix.Errno(-code)))
				}
				if typ == unix.NLMSG_ERROR {
					return fail(errors.New("sock_diag dump: unexpected acknowledgement"))
				}
				return nil
			}
		}
	}
}

// close drops the socket, and with it any unread replies.
func (e *exactDiag) close() {
	if e.open {
		unix.Close(e.fd)
		e.open = false
	}
}
