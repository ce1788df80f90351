// Package iscsipdu measures SCSI response times passively from iSCSI
// traffic (RFC 7143): it parses the PDU headers out of each direction's TCP
// byte stream, remembers every SCSI Command by its Initiator Task Tag, and
// when the matching SCSI Response (or final Data-In carrying status)
// passes, reports the latency per initiator, LUN and read/write. This is
// bridge mode's response-time signal (thesis 6.9): it needs no access to
// the target, only a copy of the packets.
//
// It does not capture packets, reassemble TCP out of order, or decrypt
// anything: callers feed it each direction's payload bytes in stream order
// (Tracker.Feed), e.g. from AF_PACKET or NFLOG. It keeps bounded state: a
// partial header per stream and a capped table of outstanding commands per
// connection.
//
// Imports (sanqos): internal/pdutrack.
package iscsipdu

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/sanqos/sanqos/internal/pdutrack"
)

// BHSLen is the Basic Header Segment's length.
const BHSLen = 48

// Opcodes used here (RFC 7143 §11.1.1).
const (
	OpNOPOut      = 0x00
	OpSCSICommand = 0x01
	OpTaskMgmt    = 0x02
	OpLogin       = 0x03
	OpText        = 0x04
	OpDataOut     = 0x05
	OpLogout      = 0x06
	OpSNACK       = 0x10
	OpNOPIn       = 0x20
	OpSCSIResp    = 0x21
	OpTaskMgmtRsp = 0x22
	OpLoginRsp    = 0x23
	OpTextRsp     = 0x24
	OpDataIn      = 0x25
	OpLogoutRsp   = 0x26
	OpR2T         = 0x31
	OpAsync       = 0x32
	OpReject      = 0x3f
)

// Direction is which way a stream flows.
type Direction uint8

const (
	// ToTarget is initiator → target (commands, Data-Out).
	ToTarget Direction = iota
	// ToInitiator is target → initiator (responses, Data-In).
	ToInitiator
)

func (d Direction) String() string {
	if d == ToTarget {
		return "to-target"
	}
	return "to-initiator"
}

// validOp reports whether op may appear in direction d.
func validOp(op byte, d Direction) bool {
	switch d {
	case ToTarget:
		switch op {
		case OpNOPOut, OpSCSICommand, OpTaskMgmt, OpLogin, OpText, OpDataOut, OpLogout, OpSNACK:
			return true
		}
	case ToInitiator:
		switch op {
		case OpNOPIn, OpSCSIResp, OpTaskMgmtRsp, OpLoginRsp, OpTextRsp, OpDataIn, OpLogoutRsp, OpR2T, OpAsync, OpReject:
			return true
		}
	}
	return false
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Digests says whether the connection negotiated CRC32C header and data
// digests (HeaderDigest/DataDigest keys at login; the parser does not
// follow the login, so the caller says).
type Digests struct {
	Header, Data bool
}

// maxHeader is the longest header: BHS, 255 words of AHS, header digest.
const maxHeader = BHSLen + 255*4 + 4

// DefaultMaxSegment caps the data segment length accepted (RFC 7143 allows
// 2^24−1; MaxRecvDataSegmentLength defaults to 8 KiB and is rarely above
// 256 KiB). A larger length in a header is taken as garbage, which makes
// resynchronisation after lost bytes much less likely to lock onto noise.
const DefaultMaxSegment = 1 << 20

// stream parses one direction of one connection.
type stream struct {
	pdutrack.Buffer
	dir    Direction
	dig    Digests
	maxSeg int
}

// bufCap bounds what a stream keeps between calls: a header and the next
// BHS for confirming a resync.
const bufCap = 2*maxHeader + BHSLen

func newStream(dir Direction, dig Digests, maxSeg int) *stream {
	if maxSeg <= 0 {
		maxSeg = DefaultMaxSegment
	}
	return &stream{Buffer: pdutrack.NewBuffer(bufCap), dir: dir, dig: dig, maxSeg: maxSeg}
}

// pduLen returns the header length (BHS + AHS + header digest) and the
// bytes that follow it (padded data segment + data digest), or ok false if
// h (at least BHSLen bytes) cannot start a PDU in this direction.
func (s *stream) pduLen(h []byte) (hdr, rest int, ok bool) {
	if h[0]&0x80 != 0 || !validOp(h[0]&0x3f, s.dir) {
		return 0, 0, false
	}
	dsl := int(h[5])<<16 | int(h[6])<<8 | int(h[7])
	if dsl > s.maxSeg {
		return 0, 0, false
	}
	hdr = BHSLen + int(h[4])*4
	if s.dig.Header {
		hdr += 4
	}
	rest = (dsl + 3) &^ 3
	if s.dig.Data && dsl > 0 {
		rest += 4
	}
	return hdr, rest, true
}

// headerOK checks the header digest when there is one.
func (s *stream) headerOK(h []byte, hdr int) bool {
	if !s.dig.Header {
		return true
	}
	return crc32.Checksum(h[:hdr-4], castagnoli) == binary.LittleEndian.Uint32(h[hdr-4:hdr])
}

// feed consumes p and calls emit with each complete header (BHS first;
// the slice is only valid during the call); it returns the bytes dropped
// resynchronising.
func (s *stream) feed(p []byte, emit func(h []byte)) int {
	return s.Feed(p, func() { s.Parse(BHSLen, func(b []byte) (int, int) { return s.step(b, emit) }) })
}

// step takes the header at the front of b. In sequence a plausible header
// is trusted; after garbage a candidate must also be followed by a
// plausible header (or be confirmed by its digest) before it is believed,
// because random bytes look like a BHS often enough. A candidate whose
// successor lies beyond what the buffer can hold (a long data segment) is
// accepted on its own.
func (s *stream) step(b []byte, emit func(h []byte)) (int, int) {
	hdr, rest, ok := s.pduLen(b)
	if ok && len(b) < hdr {
		return 0, 0 // hdr ≤ maxHeader always fits the buffer
	}
	if ok {
		ok = s.headerOK(b, hdr)
	}
	if ok && !s.Synced && !s.dig.Header {
		// Confirm with the next header when it is in the buffer.
		next := hdr + rest
		switch {
		case len(b) >= next+BHSLen:
			_, _, ok = s.pduLen(b[next:])
		case next+BHSLen <= cap(s.Buf):
			return 0, 0 // wait for more bytes (bounded: it fits in the buffer)
		}
	}
	if !ok {
		return s.Resync()
	}
	s.Synced = true
	emit(b[:hdr])
	return hdr, rest
}
