// Package nvmetcp measures NVMe command response times passively from
// NVMe/TCP traffic (NVM Express TCP Transport Specification 1.0), as
// iscsipdu does for iSCSI, and says which host uses which subsystem: it
// parses the PDU headers out of each direction's TCP byte stream, times
// every command capsule by its command identifier (CID) until its
// response capsule — or the last C2HData PDU with the SUCCESS flag, which
// completes a read without a response — and reads the Fabrics Connect
// command of each queue (host NQN, subsystem NQN, queue id).
//
// Like iscsipdu it does not capture packets or decrypt anything: callers
// feed each direction's payload in stream order (Tracker.Feed), directly
// or through iscsipdu.Reassembler, which knows nothing of the protocol.
// State is bounded: a partial header (or one Connect capsule) per stream
// and a capped table of outstanding commands per connection.
//
// It shares iscsipdu's Flow, Direction and reassembler.
//
// Imports (sanqos): internal/pdutrack, iscsipdu.
package nvmetcp

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// Port is NVMe/TCP's registered I/O port (IANA: nvme-tcp, 4420).
const Port = 4420

// PDU types (NVMe/TCP 1.0, 3.6.1).
const (
	TypeICReq       = 0x00
	TypeICResp      = 0x01
	TypeH2CTermReq  = 0x02
	TypeC2HTermReq  = 0x03
	TypeCapsuleCmd  = 0x04
	TypeCapsuleResp = 0x05
	TypeH2CData     = 0x06
	TypeC2HData     = 0x07
	TypeR2T         = 0x09
)

// Common header flags.
const (
	FlagHDGST = 0x01 // a header digest follows the header
	FlagDDGST = 0x02 // a data digest follows the data
	// FlagLast marks the last data PDU of a transfer (C2HData, H2CData).
	FlagLast = 0x04
	// FlagSuccess (C2HData, with FlagLast) completes the command: no
	// response capsule follows.
	FlagSuccess = 0x08
)

// CHLen is the common header's length.
const CHLen = 8

// hlen is each type's fixed header length (without digest): the
// strongest plausibility check on a header, since random bytes rarely
// carry the right one.
var hlen = [...]byte{
	TypeICReq: 128, TypeICResp: 128, TypeH2CTermReq: 24, TypeC2HTermReq: 24,
	TypeCapsuleCmd: 72, TypeCapsuleResp: 24, TypeH2CData: 24, TypeC2HData: 24, 0x08: 0, TypeR2T: 24,
}

// Opcodes the tracker classifies (NVM command set; Fabrics).
const (
	OpcodeFlush   = 0x00
	OpcodeWrite   = 0x01
	OpcodeRead    = 0x02
	OpcodeFabrics = 0x7f
	// FctypeConnect is the Fabrics command type of Connect.
	FctypeConnect = 0x01
)

// ConnectDataLen is the Connect command's data: host id, controller id,
// subsystem NQN at 256–511, host NQN at 512–767.
const ConnectDataLen = 1024

// Header is one decoded PDU header. Fields a type does not carry are 0.
type Header struct {
	Type, Flags byte
	HLen, PDO   byte
	PLen        uint32
	// CID: a capsule's command identifier; the data PDUs' and R2T's CCCID.
	CID uint16
	// TTag is the transfer tag of R2T and H2CData.
	TTag uint16
	// Opcode, NSID and Fctype are a CapsuleCmd's (Fctype for 0x7f only);
	// QID is a Connect's queue id (SQE byte 42).
	Opcode byte
	Fctype byte
	NSID   uint32
	QID    uint16
	// Status is a CapsuleResp's status field without the phase bit.
	Status uint16
	// Offset and Length: a data PDU's DATAO/DATAL, an R2T's R2TO/R2TL.
	Offset, Length uint32
	// Digests an ICReq asks for, or an ICResp grants.
	Digests Digests
}

// Digests are the CRC32C digests of a connection.
type Digests struct {
	Header, Data bool
}

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	errShort   = errors.New("nvmetcp: header too short")
	errType    = errors.New("nvmetcp: not a PDU header")
)

// DecodeHeader decodes the header h (at least its HLen bytes). It checks
// what a header alone can prove: a known type, its fixed header length
// and a PLen that holds header, digest and data offset.
func DecodeHeader(h []byte) (Header, error) {
	if len(h) < CHLen {
		return Header{}, errShort
	}
	p := Header{Type: h[0], Flags: h[1], HLen: h[2], PDO: h[3], PLen: binary.LittleEndian.Uint32(h[4:8])}
	if int(p.Type) >= len(hlen) || hlen[p.Type] == 0 || p.HLen != hlen[p.Type] {
		return p, errType
	}
	hdr := uint32(p.HLen)
	if p.Flags&FlagHDGST != 0 {
		hdr += 4
	}
	if p.PLen < hdr || p.PDO != 0 && (uint32(p.PDO) < hdr || uint32(p.PDO) > p.PLen) {
		return p, errType
	}
	if len(h) < int(p.HLen) {
		return p, errShort
	}
	le16 := func(i int) uint16 { return binary.LittleEndian.Uint16(h[i:]) }
	le32 := func(i int) uint32 { return binary.LittleEndian.Uint32(h[i:]) }
	switch p.Type {
	case TypeICReq, TypeICResp:
		p.Digests = Digests{Header: h[11]&0x01 != 0, Data: h[11]&0x02 != 0}
	case TypeCapsuleCmd:
		p.Opcode, p.CID, p.NSID = h[8], le16(10), le32(12)
		if p.Opcode == OpcodeFabrics {
			p.Fctype, p.NSID = h[12], 0
			if p.Fctype == FctypeConnect {
				p.QID = le16(CHLen + 42)
			}
		}
	case TypeCapsuleResp:
		p.CID, p.Status = le16(20), le16(22)>>1
	case TypeH2CData, TypeC2HData, TypeR2T:
		p.CID, p.TTag, p.Offset, p.Length = le16(8), le16(10), le32(12), le32(16)
		if p.Type == TypeC2HData {
			p.TTag = 0 // reserved there
		}
	}
	return p, nil
}

// IsConnect reports whether p is a Fabrics Connect command.
func (p Header) IsConnect() bool {
	return p.Type == TypeCapsuleCmd && p.Opcode == OpcodeFabrics && p.Fctype == FctypeConnect
}

// Completes reports whether p ends the command it names: a response
// capsule, or a last C2HData with SUCCESS.
func (p Header) Completes() bool {
	const ls = FlagLast | FlagSuccess
	return p.Type == TypeCapsuleResp || p.Type == TypeC2HData && p.Flags&ls == ls
}

// Connect is what a Fabrics Connect command says.
type Connect struct {
	QID     uint16
	HostID  [16]byte
	HostNQN string
	SubNQN  string
}

// ParseConnect reads a Connect command's 1024-byte data; false if data is
// short.
func ParseConnect(p Header, data []byte) (Connect, bool) {
	if len(data) < ConnectDataLen {
		return Connect{}, false
	}
	c := Connect{QID: p.QID, SubNQN: nqn(data[256:512]), HostNQN: nqn(data[512:768])}
	copy(c.HostID[:], data[:16])
	return c, true
}

// nqn is a NUL-padded NQN field as text, cut at the first NUL and kept
// to printable ASCII (it is untrusted: it ends up in logs).
func nqn(b []byte) string {
	out := make([]byte, 0, 64)
	for _, c := range b {
		if c == 0 {
			break
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out = append(out, c)
	}
	return string(out)
}

// inCapsule returns the data of PDU pdu (whole, PLen bytes) that follows
// its header at PDO, without a data digest.
func inCapsule(p Header, pdu []byte) []byte {
	if p.PDO == 0 || int(p.PLen) > len(pdu) {
		return nil
	}
	end := int(p.PLen)
	if p.Flags&FlagDDGST != 0 {
		end -= 4
	}
	if end < int(p.PDO) {
		return nil
	}
	return pdu[p.PDO:end]
}

// headerDigestOK checks the CRC32C after h's header when the flags say
// there is one (h holds at least HLen+4 bytes then).
func headerDigestOK(p Header, h []byte) bool {
	if p.Flags&FlagHDGST == 0 {
		return true
	}
	n := int(p.HLen)
	return crc32.Checksum(h[:n], castagnoli) == binary.LittleEndian.Uint32(h[n:n+4])
}
