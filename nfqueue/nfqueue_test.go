package nfqueue

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
)

func TestConfigMessageEncoding(t *testing.T) {
	m := configMessage(7, encodeCmd(cfgCmdBind))
	if got, want := uint16(m.Header.Type), uint16(0x0302); got != want {
		t.Fatalf("type = %#x, want %#x (NFNL_SUBSYS_QUEUE<<8 | NFQNL_MSG_CONFIG)", got, want)
	}
	if m.Header.Flags != netlink.Request|netlink.Acknowledge {
		t.Fatalf("flags = %v", m.Header.Flags)
	}
	want := []byte{
		0, 0, 0, 7, // nfgenmsg: AF_UNSPEC, v0, res_id=7 big endian
		8, 0, 1, 0, // nla_len=8, NFQA_CFG_CMD
		1, 0, 0, 0, // BIND, pad, pf=0
	}
	if !bytes.Equal(m.Data, want) {
		t.Fatalf("bind data\n got %x\nwant %x", m.Data, want)
	}

	m = configMessage(0x0102, encodeParams(Config{CopyRange: 128, MaxLen: 5000, Flags: FlagFailOpen | FlagGSO}))
	want = []byte{
		0, 0, 1, 2,
		9, 0, 2, 0, 0, 0, 0, 128, 2, 0, 0, 0, // NFQA_CFG_PARAMS: copy_range=128 BE, COPY_PACKET, padded to 4
		8, 0, 3, 0, 0, 0, 0x13, 0x88, // NFQA_CFG_QUEUE_MAXLEN 5000 BE
		8, 0, 5, 0, 0, 0, 0, 5, // NFQA_CFG_FLAGS fail-open|gso
		8, 0, 4, 0, 0, 0, 0, 5, // NFQA_CFG_MASK same
	}
	if !bytes.Equal(m.Data, want) {
		t.Fatalf("params data\n got %x\nwant %x", m.Data, want)
	}
}

func TestVerdictMessageEncoding(t *testing.T) {
	m := verdictMessage(3, msgVerdict, 0xdeadbeef, Accept)
	if got, want := uint16(m.Header.Type), uint16(0x0301); got != want {
		t.Fatalf("type = %#x, want %#x", got, want)
	}
	if m.Header.Flags&netlink.Acknowledge != 0 {
		t.Fatal("verdicts must not ask for an ack: nobody reads it")
	}
	want := []byte{
		0, 0, 0, 3,
		12, 0, 2, 0, // NFQA_VERDICT_HDR
		0, 0, 0, 1, // NF_ACCEPT
		0xde, 0xad, 0xbe, 0xef, // id
	}
	if !bytes.Equal(m.Data, want) {
		t.Fatalf("verdict data\n got %x\nwant %x", m.Data, want)
	}
	// The hand-built attribute must be what the generic encoder makes.
	hdr := make([]byte, 8)
	binary.BigEndian.PutUint32(hdr, 1)
	binary.BigEndian.PutUint32(hdr[4:], 0xdeadbeef)
	gen, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: attrVerdictHdr, Data: hdr}})
	if !bytes.Equal(m.Data[4:], gen) {
		t.Fatalf("hand-built attr %x != MarshalAttributes %x", m.Data[4:], gen)
	}
	if b := verdictMessage(3, msgVerdictBatch, 9, Accept); uint16(b.Header.Type) != 0x0303 {
		t.Fatalf("batch type = %#x", uint16(b.Header.Type))
	}
}

func TestDecodePacket(t *testing.T) {
	hdr := []byte{0, 0, 0x01, 0x02, 0x86, 0xdd, 3} // id 258, IPv6, NF_INET_LOCAL_OUT
	payload := bytes.Repeat([]byte{0xab}, 100)
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: attrPacketHdr, Data: hdr},
		{Type: attrMark, Data: binary.BigEndian.AppendUint32(nil, 0x42)},
		{Type: attrOutDev, Data: binary.BigEndian.AppendUint32(nil, 5)},
		{Type: attrSkbInfo, Data: binary.BigEndian.AppendUint32(nil, SkbGSO)},
		{Type: attrCapLen, Data: binary.BigEndian.AppendUint32(nil, 1500)},
		{Type: attrPayload, Data: payload},
		{Type: 99, Data: []byte{1, 2, 3}}, // unknown attributes are skipped
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodePacket(append([]byte{10, 0, 0, 0}, attrs...))
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != 258 || p.HWProtocol != 0x86dd || p.Hook != 3 || p.Mark != 0x42 || p.OutDev != 5 || p.SkbInfo != SkbGSO {
		t.Fatalf("decoded %+v", p)
	}
	if !bytes.Equal(p.Payload, payload) || p.Len() != 1500 {
		t.Fatalf("payload %d bytes, Len %d", len(p.Payload), p.Len())
	}

	if _, err := decodePacket([]byte{2, 0}); err == nil {
		t.Fatal("short message accepted")
	}
	noHdr, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: attrPayload, Data: payload}})
	if _, err := decodePacket(append([]byte{2, 0, 0, 0}, noHdr...)); err == nil {
		t.Fatal("message without packet header accepted")
	}
}
