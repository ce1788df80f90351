package nvmetcp

import (
	"github.com/sanqos/sanqos/internal/pdutrack"
	"github.com/sanqos/sanqos/iscsipdu"
)

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
	pdutrack.Buffer
	dir    Direction
	maxPDU uint32
	dig    *Digests
}

func newStream(dir Direction, maxPDU int, dig *Digests) *stream {
	if maxPDU <= 0 {
		maxPDU = DefaultMaxPDU
	}
	return &stream{Buffer: pdutrack.NewBuffer(bufCap), dir: dir, maxPDU: uint32(maxPDU), dig: dig}
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
// the call. It returns the bytes dropped resynchronising.
func (s *stream) feed(p []byte, emit func(h Header, pdu []byte)) int {
	return s.Feed(p, func() { s.Parse(CHLen, func(b []byte) (int, int) { return s.step(b, emit) }) })
}

// step takes the header at the front of b. In sequence a plausible header
// is trusted; after garbage a candidate must also be followed by a
// plausible header (or carry a good header digest) before it is believed,
// unless its successor lies beyond what the buffer can hold.
func (s *stream) step(b []byte, emit func(h Header, pdu []byte)) (int, int) {
	p, ok := s.plausible(b)
	hdr := int(p.HLen)
	if p.Flags&FlagHDGST != 0 {
		hdr += 4
	}
	if ok && len(b) < hdr {
		return 0, 0 // hdr ≤ 132 always fits the buffer
	}
	if ok {
		p, _ = DecodeHeader(b[:hdr])
		ok = headerDigestOK(p, b)
	}
	whole := ok && p.IsConnect() && int(p.PLen) <= cap(s.Buf)
	if ok && whole && len(b) < int(p.PLen) {
		return 0, 0 // wait for the Connect's data (bounded: it fits)
	}
	if ok && !s.Synced && p.Flags&FlagHDGST == 0 {
		next := int(p.PLen)
		switch {
		case len(b) >= next+CHLen:
			_, ok = s.plausible(b[next:])
		case next+CHLen <= cap(s.Buf):
			return 0, 0
		}
	}
	if !ok {
		return s.Resync()
	}
	s.Synced = true
	var pdu []byte
	if whole {
		pdu = b[:p.PLen]
	}
	emit(p, pdu)
	return hdr, int(p.PLen) - hdr
}
