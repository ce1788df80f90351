package capture

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/net/bpf"
)

// packet builds an IP packet with a TCP header (no payload beyond pay).
func packet(v6 bool, proto byte, sport, dport uint16, frag uint16, pay []byte) []byte {
	tcp := make([]byte, 20+len(pay))
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], 1000)
	tcp[12] = 5 << 4
	tcp[13] = 0x18
	copy(tcp[20:], pay)
	if v6 {
		h := make([]byte, 40)
		h[0] = 0x60
		binary.BigEndian.PutUint16(h[4:], uint16(len(tcp)))
		h[6] = proto
		h[23], h[39] = 2, 1
		return append(h, tcp...)
	}
	h := make([]byte, 24) // with 4 bytes of options: IHL 6
	h[0] = 0x46
	binary.BigEndian.PutUint16(h[2:], uint16(len(h)+len(tcp)))
	binary.BigEndian.PutUint16(h[6:], frag)
	h[9] = proto
	copy(h[12:], []byte{10, 0, 0, 2, 10, 0, 0, 1})
	return append(h, tcp...)
}

// The filter keeps TCP of the port either way, in IPv4 (with options,
// unfragmented or a first fragment) and IPv6, and nothing else.
func TestFilter(t *testing.T) {
	raw, err := Filter(3260)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(func() []bpf.Instruction {
		var ins []bpf.Instruction
		for _, r := range raw {
			ins = append(ins, r.Disassemble())
		}
		return ins
	}())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"v4 to port", packet(false, 6, 40000, 3260, 0, nil), true},
		{"v4 from port", packet(false, 6, 3260, 40000, 0, []byte("x")), true},
		{"v4 DF set", packet(false, 6, 3260, 40000, 0x4000, nil), true},
		{"v4 other port", packet(false, 6, 40000, 3261, 0, nil), false},
		{"v4 udp", packet(false, 17, 40000, 3260, 0, nil), false},
		{"v4 later fragment", packet(false, 6, 40000, 3260, 0x0010, nil), false},
		{"v6 to port", packet(true, 6, 40000, 3260, 0, nil), true},
		{"v6 from port", packet(true, 6, 3260, 40000, 0, nil), true},
		{"v6 other port", packet(true, 6, 3261, 40000, 0, nil), false},
		{"v6 extension header", packet(true, 0, 3260, 40000, 0, nil), false},
		{"arp-ish", []byte{0, 1, 8, 0, 6, 4, 0, 1}, false},
	} {
		n, err := vm.Run(tc.pkt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := n > 0; got != tc.want {
			t.Errorf("%s: accepted=%v, want %v", tc.name, got, tc.want)
		}
	}
}

// With several ports (bridge mode's iSCSI and NVMe/TCP portals) the
// filter keeps each of them either way, and nothing else.
func TestFilterPorts(t *testing.T) {
	if _, err := Filter(); err == nil {
		t.Error("no port: accepted")
	}
	raw, err := Filter(3260, 4420, 4421)
	if err != nil {
		t.Fatal(err)
	}
	var ins []bpf.Instruction
	for _, r := range raw {
		ins = append(ins, r.Disassemble())
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pkt  []byte
		want bool
	}{
		{packet(false, 6, 40000, 3260, 0, nil), true},
		{packet(false, 6, 4420, 40000, 0, nil), true},
		{packet(true, 6, 40000, 4421, 0, nil), true},
		{packet(true, 6, 4421, 40000, 0, nil), true},
		{packet(false, 6, 40000, 4422, 0, nil), false},
		{packet(true, 17, 40000, 4420, 0, nil), false},
		{packet(false, 6, 40000, 4420, 0x0010, nil), false},
	} {
		if n, err := vm.Run(tc.pkt); err != nil || (n > 0) != tc.want {
			t.Errorf("%x: accepted %d (%v), want %v", tc.pkt[:4], n, err, tc.want)
		}
	}
}

func TestDecode(t *testing.T) {
	ts := time.Unix(1, 0)
	s, ok := Decode(packet(false, 6, 40000, 3260, 0, []byte("abc")), ts)
	if !ok || s.Src.String() != "10.0.0.2:40000" || s.Dst.String() != "10.0.0.1:3260" || string(s.Payload) != "abc" || s.Seq != 1000 || s.Flags != 0x18 || !s.Time.Equal(ts) {
		t.Fatalf("v4: %+v ok=%v", s, ok)
	}
	s, ok = Decode(packet(true, 6, 3260, 40000, 0, []byte("de")), ts)
	if !ok || s.Src.Port() != 3260 || string(s.Payload) != "de" || !s.Src.Addr().Is6() {
		t.Fatalf("v6: %+v ok=%v", s, ok)
	}
	for _, bad := range [][]byte{nil, {0x45}, packet(false, 17, 1, 2, 0, nil), packet(false, 6, 1, 2, 0, nil)[:30], {0x70, 0, 0, 0}} {
		if _, ok := Decode(bad, ts); ok {
			t.Errorf("decoded %x", bad)
		}
	}
}

func TestPcapRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w, err := NewPcapWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := packet(false, 6, 1, 3260, 0, []byte("one")), packet(true, 6, 3260, 2, 0, []byte("two"))
	t1, t2 := time.Unix(100, 5), time.Unix(101, 999999999)
	w.Write(p1, t1)
	w.Write(p2, t2)
	w.Flush()
	var got [][]byte
	var ts []time.Time
	if err := ReadPcap(&b, func(p []byte, t time.Time) { got = append(got, bytes.Clone(p)); ts = append(ts, t) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], p1) || !bytes.Equal(got[1], p2) || !ts[0].Equal(t1) || !ts[1].Equal(t2) {
		t.Fatalf("read back %d packets, times %v", len(got), ts)
	}
	if err := ReadPcap(bytes.NewReader([]byte("garbage that is not a pcap header")), func([]byte, time.Time) {}); err == nil {
		t.Fatal("garbage accepted")
	}
}
