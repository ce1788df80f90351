package nvmetcp

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"testing"
	"time"
)

// pdu builds one PDU as the NVMe/TCP spec lays it out: the common
// header, the type's header fields, the digests dig's flags ask for, and
// data (in-capsule for a command, a data PDU's payload) at PDO.
type pdu struct {
	typ, flags byte
	cid, ttag  uint16
	opcode     byte
	nsid       uint32
	status     uint16
	connect    *Connect // a Fabrics Connect (opcode 0x7f, fctype 0x01)
	dig        Digests  // for IC PDUs: asked or granted; else: present
	data       int      // bytes of data
}

func (p pdu) bytes() []byte {
	h := make([]byte, hlen[p.typ])
	h[0], h[1], h[2] = p.typ, p.flags, hlen[p.typ]
	var data []byte
	switch p.typ {
	case TypeICReq, TypeICResp:
		var d byte
		if p.dig.Header {
			d |= 1
		}
		if p.dig.Data {
			d |= 2
		}
		h[11] = d
	case TypeCapsuleCmd:
		h[8] = p.opcode
		binary.LittleEndian.PutUint16(h[10:], p.cid)
		binary.LittleEndian.PutUint32(h[12:], p.nsid)
		if p.connect != nil {
			h[8], h[12] = OpcodeFabrics, FctypeConnect
			binary.LittleEndian.PutUint16(h[CHLen+42:], p.connect.QID)
			data = make([]byte, ConnectDataLen)
			copy(data, p.connect.HostID[:])
			copy(data[256:], p.connect.SubNQN)
			copy(data[512:], p.connect.HostNQN)
		}
	case TypeCapsuleResp:
		binary.LittleEndian.PutUint16(h[20:], p.cid)
		binary.LittleEndian.PutUint16(h[22:], p.status<<1|1) // phase bit set
	case TypeH2CData, TypeC2HData, TypeR2T:
		binary.LittleEndian.PutUint16(h[8:], p.cid)
		binary.LittleEndian.PutUint16(h[10:], p.ttag)
		binary.LittleEndian.PutUint32(h[16:], uint32(p.data))
	}
	if data == nil && p.typ != TypeR2T {
		data = make([]byte, p.data)
		for i := range data {
			data[i] = byte(i * 7) // arbitrary: must never be taken for a header
		}
	}
	if p.typ != TypeICReq && p.typ != TypeICResp {
		if p.dig.Header {
			h[1] |= FlagHDGST
		}
		if p.dig.Data && len(data) > 0 {
			h[1] |= FlagDDGST
		}
	}
	out := append([]byte(nil), h...)
	if h[1]&FlagHDGST != 0 {
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(h, castagnoli))
	}
	if len(data) > 0 {
		out[3] = byte(len(out)) // PDO: no padding (CPDA 0)
		out = append(out, data...)
		if h[1]&FlagDDGST != 0 {
			out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(data, castagnoli))
		}
	}
	binary.LittleEndian.PutUint32(out[4:], uint32(len(out)))
	if h[1]&FlagHDGST != 0 { // the digest covers PDO and PLen too
		binary.LittleEndian.PutUint32(out[len(h):], crc32.Checksum(out[:len(h)], castagnoli))
	}
	return out
}

func read(cid uint16, nsid uint32) pdu {
	return pdu{typ: TypeCapsuleCmd, opcode: OpcodeRead, cid: cid, nsid: nsid}
}
func write(cid uint16, nsid uint32, inline int) pdu {
	return pdu{typ: TypeCapsuleCmd, opcode: OpcodeWrite, cid: cid, nsid: nsid, data: inline}
}
func resp(cid, status uint16) pdu { return pdu{typ: TypeCapsuleResp, cid: cid, status: status} }
func c2h(cid uint16, n int, flags byte) pdu {
	return pdu{typ: TypeC2HData, cid: cid, data: n, flags: flags}
}
func r2t(cid, ttag uint16, n int) pdu { return pdu{typ: TypeR2T, cid: cid, ttag: ttag, data: n} }
func h2c(cid, ttag uint16, n int) pdu {
	return pdu{typ: TypeH2CData, cid: cid, ttag: ttag, data: n, flags: FlagLast}
}
func connect(qid uint16, host, sub string) pdu {
	return pdu{typ: TypeCapsuleCmd, cid: 0x1000 + qid, connect: &Connect{QID: qid, HostNQN: host, SubNQN: sub, HostID: [16]byte{1, 2, 3}}}
}

var (
	host = netip.MustParseAddrPort("10.99.0.3:51000")
	ctrl = netip.MustParseAddrPort("10.99.0.1:4420")
	flow = Flow{Initiator: host, Target: ctrl}
	t0   = time.Unix(1000, 0)
)

// The header of every type decodes to its fields; what a header alone
// can refute is refused.
func TestDecodeHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want Header
		err  bool
	}{
		{"ICReq asks for both digests", pdu{typ: TypeICReq, dig: Digests{true, true}}.bytes(), Header{Type: 0, HLen: 128, PLen: 128, Digests: Digests{true, true}}, false},
		{"ICResp grants header digest", pdu{typ: TypeICResp, dig: Digests{Header: true}}.bytes(), Header{Type: 1, HLen: 128, PLen: 128, Digests: Digests{Header: true}}, false},
		{"read capsule", read(7, 1).bytes(), Header{Type: 4, HLen: 72, PLen: 72, CID: 7, Opcode: 2, NSID: 1}, false},
		{"write capsule with in-capsule data", write(8, 2, 100).bytes(), Header{Type: 4, HLen: 72, PDO: 72, PLen: 172, CID: 8, Opcode: 1, NSID: 2}, false},
		{"connect: fctype and queue id", connect(3, "h", "s").bytes(), Header{Type: 4, HLen: 72, PDO: 72, PLen: 72 + 1024, CID: 0x1003, Opcode: 0x7f, Fctype: 1, QID: 3}, false},
		{"response with status", resp(9, 0x281).bytes(), Header{Type: 5, HLen: 24, PLen: 24, CID: 9, Status: 0x281}, false},
		{"C2HData last and success", c2h(10, 4096, FlagLast|FlagSuccess).bytes(), Header{Type: 7, Flags: 0x0c, HLen: 24, PDO: 24, PLen: 24 + 4096, CID: 10, Length: 4096}, false},
		{"R2T: CCCID and transfer tag", r2t(11, 0x55, 65536).bytes(), Header{Type: 9, HLen: 24, PLen: 24, CID: 11, TTag: 0x55, Length: 65536}, false},
		{"H2CData: CCCID and transfer tag", h2c(11, 0x55, 512).bytes(), Header{Type: 6, Flags: FlagLast, HLen: 24, PDO: 24, PLen: 536, CID: 11, TTag: 0x55, Length: 512}, false},
		{"header digest", pdu{typ: TypeCapsuleResp, cid: 1, dig: Digests{Header: true}}.bytes(), Header{Type: 5, Flags: FlagHDGST, HLen: 24, PLen: 28, CID: 1}, false},
		{"unknown type", []byte{0x08, 0, 0, 0, 8, 0, 0, 0}, Header{}, true},
		{"wrong header length", []byte{TypeCapsuleResp, 0, 25, 0, 25, 0, 0, 0}, Header{}, true},
		{"PLen shorter than the header", []byte{TypeCapsuleResp, 0, 24, 0, 20, 0, 0, 0}, Header{}, true},
		{"PDO inside the header", []byte{TypeC2HData, 0, 24, 8, 100, 0, 0, 0}, Header{}, true},
		{"PDO beyond PLen", []byte{TypeC2HData, 0, 24, 200, 100, 0, 0, 0}, Header{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeHeader(tc.b)
			if tc.err {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseConnect(t *testing.T) {
	b := connect(2, "nqn.2026-11.lab:b3", "nqn.2026-11.lab:vg1").bytes()
	h, err := DecodeHeader(b)
	if err != nil || !h.IsConnect() {
		t.Fatal(h, err)
	}
	c, ok := ParseConnect(h, inCapsule(h, b))
	if !ok || c.QID != 2 || c.HostNQN != "nqn.2026-11.lab:b3" || c.SubNQN != "nqn.2026-11.lab:vg1" || c.HostID[2] != 3 {
		t.Fatalf("%+v %v", c, ok)
	}
	data := make([]byte, ConnectDataLen)
	copy(data[512:], "a\x01b\xffc\x00junk")
	if c, _ := ParseConnect(h, data); c.HostNQN != "a?b?c" {
		t.Errorf("host NQN %q: want control bytes masked and cut at NUL", c.HostNQN)
	}
	if _, ok := ParseConnect(h, data[:1000]); ok {
		t.Error("short data parsed")
	}
}
