package sample

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	mdnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
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

// connSample is one connection's TCP_INFO from either path. An exact
// lookup fills only the fields Sample reads (parseDiagReply).
type connSample struct {
	key connKey
	ti  netlink.TCPInfo
}

// idOf builds the inet_diag_sockid of a dumped socket.
func idOf(fam uint8, s netlink.SocketID) diagID {
	d := diagID{family: fam}
	binary.BigEndian.PutUint16(d.id[0:], s.SourcePort)
	binary.BigEndian.PutUint16(d.id[2:], s.DestinationPort)
	putIP := func(b []byte, ip net.IP) {
		if v4 := ip.To4(); fam == syscall.AF_INET && v4 != nil {
			copy(b, v4)
		} else {
			copy(b, ip.To16())
		}
	}
	putIP(d.id[4:20], s.Source)
	putIP(d.id[20:36], s.Destination)
	binary.NativeEndian.PutUint32(d.id[36:], s.Interface)
	binary.NativeEndian.PutUint32(d.id[40:], s.Cookie[0])
	binary.NativeEndian.PutUint32(d.id[44:], s.Cookie[1])
	return d
}

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	inetDiagInfo     = 2  // INET_DIAG_INFO
	inetDiagMsgLen   = 72 // struct inet_diag_msg
)

// request is an exact-lookup inet_diag_req_v2 asking for TCP_INFO.
func (d diagID) request() []byte {
	b := make([]byte, 56)
	b[0], b[1], b[2] = d.family, syscall.IPPROTO_TCP, 1<<(inetDiagInfo-1)
	binary.NativeEndian.PutUint32(b[4:], ^uint32(0))
	copy(b[8:], d.id[:])
	return b
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
			s.ti.Delivery_rate = binary.NativeEndian.Uint64(ti[160:])
			return s, nil
		}
		a = a[(l+3)&^3:]
	}
	return connSample{}, errors.New("inet_diag reply without INET_DIAG_INFO")
}

// exactDiag looks connections up over one long-lived sock_diag socket.
type exactDiag struct {
	c    *mdnl.Conn
	msgs []mdnl.Message
}

func (e *exactDiag) lookup(ids []diagID) ([]connSample, error) {
	if e.c == nil {
		c, err := mdnl.Dial(syscall.NETLINK_INET_DIAG, nil) // = NETLINK_SOCK_DIAG
		if err != nil {
			return nil, err
		}
		e.c = c
	}
	e.msgs = e.msgs[:0]
	for _, d := range ids {
		e.msgs = append(e.msgs, mdnl.Message{Header: mdnl.Header{Type: sockDiagByFamily, Flags: mdnl.Request}, Data: d.request()})
	}
	if _, err := e.c.SendMessages(e.msgs); err != nil {
		return nil, err
	}
	out := make([]connSample, 0, len(ids))
	for len(out) < len(ids) {
		// A failed lookup (ENOENT: the connection is gone) comes back as
		// an error. The other requests' replies would then confuse the
		// next round, so the socket goes with them; the caller dumps.
		ms, err := e.c.Receive()
		if err != nil {
			e.close()
			return nil, err
		}
		for _, m := range ms {
			s, err := parseDiagReply(m.Data)
			if err != nil {
				e.close()
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// close drops the socket, and with it any unread replies.
func (e *exactDiag) close() {
	if e.c != nil {
		e.c.Close()
		e.c = nil
	}
}
