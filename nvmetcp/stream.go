package nvmetcp

import "github.com/sanqos/sanqos/iscsipdu"

// Direction is which way a stream flows: iscsipdu's, host → controller
// being ToTarget.
type Direction = iscsipdu.Direction

// The two directions.
const (
	ToTarget    = iscsipdu.ToTarget    // host → controller: commands, H2CData
	ToInitiator = iscsipdu.ToInitiator // controller → host: responses, C2HData, R2T
)

// validType reports whether PDU type t may flow in direction d.
func validType(t byte, d Direction) bool {
	switch t {
	case TypeICReq, TypeH2CTermReq, TypeCapsuleCmd, TypeH2CData:
		return d == ToTarget
	case TypeICResp, TypeC2HTermReq, TypeCapsuleResp, TypeC2HData, TypeR2T:
		return d == ToInitiator
	}
	return false
}

// DefaultMaxPDU caps the PDU length accepted. nvmet sends a read's data
// in one C2HData PDU, as long as the transfer (its MDTS allows a few
// MiB); a larger PLen is taken for garbage, which keeps a resync from
// locking onto noise.
const DefaultMaxPDU = 16 << 20

// bufCap bounds what a stream keeps between calls: a Connect capsule
// (72-byte header, digests, 1024 bytes of data) and the next common
// header for confirming a resync. Other data is skipped, never buffered.
const bufCap = 2048

// stream parses one direction of one connection.
type stream struct {
	dir     Direction
	maxPDU  uint32
	buf     []byte
	skip    int
	synced  bool // the last header was accepted in sequence
	dig     *Digests
	Resyncs int // bytes dropped while looking for a header
}

func newStream(dir Direction, maxPDU int, dig *Digests) *stream {
	if maxPDU <= 0 {
		maxPDU = DefaultMaxPDU
	}
	return &stream{dir: dir, maxPDU: uint32(maxPDU), synced: true, dig: dig, buf: make([]byte, 0, bufCap)}
}

// plausible checks the common header at b (≥ CHLen bytes) for this
// direction: type, its header length, a PLen in bounds and, once the
// connection's digests are known, the header-digest flag they imply.
func (s *stream) plausible(b []byte) (Header, bool) {
	p, err := DecodeHeader(b[:CHLen])
	if err != nil && err != errShort || !validType(p.Type, s.dir) || p.PLen > s.maxPDU {
		return p, false
	}
	if s.dig != nil && p.Type != TypeICReq && p.Type != TypeICResp && p.Type != TypeH2CTermReq && p.Type != TypeC2HTermReq &&
		(p.Flags&FlagHDGST != 0) != s.dig.Header {
		return p, false
	}
	return p, true
}

// feed consumes p and calls emit with each complete header and, for a
// Connect capsule, its whole PDU (else nil); both are valid only during
// the call.
func (s *stream) feed(p []byte, emit func(h Header, pdu []byte)) {
	for len(p) > 0 {
		if s.skip > 0 && len(s.buf) == 0 {
			n := min(s.skip, len(p))
			s.skip -= n
			p = p[n:]
			continue
		}
		n := min(cap(s.buf)-len(s.buf), len(p))
		s.buf = append(s.buf, p[:n]...)
		p = p[n:]
		s.parse(emit)
	}
}

// parse consumes whole headers from buf. In sequence a plausible header is
// trusted; after garbage a candidate must also be followed by a plausible
// header (or carry a good header digest) before it is believed, unless
// its successor lies beyond what the buffer can hold.
func (s *stream) parse(emit func(h Header, pdu []byte)) {
	b := s.buf
	for {
		if s.skip > 0 {
			n := min(s.skip, len(b))
			s.skip -= n
			b = b[n:]
			if s.skip > 0 {
				break
			}
		}
		if len(b) < CHLen {
			break
		}
		p, ok := s.plausible(b)
		hdr := int(p.HLen)
		if p.Flags&FlagHDGST != 0 {
			hdr += 4
		}
		if ok && len(b) < hdr {
			break // hdr ≤ 132 always fits the buffer
		}
		if ok {
			p, _ = DecodeHeader(b[:hdr])
			ok = headerDigestOK(p, b)
		}
		whole := ok && p.IsConnect() && int(p.PLen) <= cap(s.buf)
		if ok && whole && len(b) < int(p.PLen) {
			s.compact(b) // wait for the Connect's data (bounded: it fits)
			return
		}
		if ok && !s.synced && p.Flags&FlagHDGST == 0 {
			next := int(p.PLen)
			switch {
			case len(b) >= next+CHLen:
				_, ok = s.plausible(b[next:])
			case next+CHLen <= cap(s.buf):
				s.compact(b)
				return
			}
		}
		if !ok {
			s.synced = false
			s.Resyncs++
			b = b[1:]
			continue
		}
		s.synced = true
		var pdu []byte
		if whole {
			pdu = b[:p.PLen]
		}
		emit(p, pdu)
		b = b[hdr:]
		s.skip = int(p.PLen) - hdr
	}
	s.compact(b)
}

// compact moves the unconsumed bytes to the front of the buffer.
func (s *stream) compact(b []byte) {
	s.buf = s.buf[:copy(s.buf[:cap(s.buf)], b)]
}
