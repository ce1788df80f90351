package nfqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
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

// The hand-built verdict batch of the delay line's hot path is byte for
// byte what mdlayher/netlink marshals for the same messages.
func TestAppendVerdictMatchesMarshal(t *testing.T) {
	for _, id := range []uint32{0, 1, 0xdeadbeef} {
		m := verdictMessage(5, msgVerdict, id, Accept)
		m.Header.Length = verdictLen
		want, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got := appendVerdict(nil, 5, msgVerdict, id, Accept); !bytes.Equal(got, want) {
			t.Errorf("id %#x: appendVerdict %x, MarshalBinary %x", id, got, want)
		}
	}
}

// ReadPackets takes one datagram as the kernel sends it (here through a
// socket pair): every packet message in it, the barrier's ack as
// ErrSynced, a kernel error as an error, and EAGAIN when nothing waits.
// WriteVerdicts sends one datagram of verdicts in order.
func TestReadPacketsAndWriteVerdicts(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	packet := func(id uint32, payload []byte) []byte {
		hdr := binary.BigEndian.AppendUint32(nil, id)
		hdr = append(hdr, 0x08, 0x00, 3)
		attrs, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: attrPacketHdr, Data: hdr}, {Type: attrPayload, Data: payload}})
		if err != nil {
			t.Fatal(err)
		}
		m := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(subsysQueue<<8 | msgPacket)}, Data: append([]byte{2, 0, 0, 7}, attrs...)}
		m.Header.Length = uint32(unix.NLMSG_HDRLEN + len(m.Data))
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ack := func(seq uint32, errno int32) []byte {
		// struct nlmsghdr, then struct nlmsgerr: the error and the
		// request's header.
		b := binary.NativeEndian.AppendUint32(nil, 16+4+16)
		b = binary.NativeEndian.AppendUint16(b, unix.NLMSG_ERROR)
		b = binary.NativeEndian.AppendUint16(b, 0)
		b = binary.NativeEndian.AppendUint32(b, seq)
		b = binary.NativeEndian.AppendUint32(b, 0)
		b = binary.NativeEndian.AppendUint32(b, uint32(errno))
		return append(b, make([]byte, 16)...)
	}
	c := &Conn{queue: 7}
	c.syncSeq.Store(42)
	buf := make([]byte, 4096)
	for _, tc := range []struct {
		name    string
		dgram   []byte
		ids     []uint32
		wantErr error
	}{
		{"two packets in one datagram", append(packet(1, []byte{0x45, 1}), packet(2, []byte{0x45, 2, 3})...), []uint32{1, 2}, nil},
		{"packet then the barrier", append(packet(3, []byte{0x45}), ack(42, 0)...), []uint32{3}, ErrSynced},
		{"a kernel error", ack(9, -int32(unix.ENOENT)), nil, unix.ENOENT},
		{"another request's ack", ack(9, 0), nil, nil},
	} {
		if _, err := unix.Write(fds[1], tc.dgram); err != nil {
			t.Fatal(err)
		}
		pkts, err := c.ReadPackets(fds[0], buf, nil)
		var ids []uint32
		for _, p := range pkts {
			ids = append(ids, p.ID)
		}
		if !errors.Is(err, tc.wantErr) || !slices.Equal(ids, tc.ids) {
			t.Errorf("%s: packets %v, err %v; want %v, %v", tc.name, ids, err, tc.ids, tc.wantErr)
		}
	}
	if _, err := c.ReadPackets(fds[0], buf, nil); err != unix.EAGAIN {
		t.Errorf("empty socket: %v, want EAGAIN", err)
	}

	if _, err := c.WriteVerdicts(fds[1], nil, []uint32{5, 6, 7}, Accept); err != nil {
		t.Fatal(err)
	}
	n, err := unix.Read(fds[0], buf)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, id := range []uint32{5, 6, 7} {
		want = appendVerdict(want, 7, msgVerdict, id, Accept)
	}
	if !bytes.Equal(buf[:n], want) {
		t.Errorf("verdicts written %x, want %x", buf[:n], want)
	}
}
