package nvmetcp

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// ipPacket builds an IPv4 (with 4 bytes of options) or IPv6 packet with
// a TCP header of tcpOpt option bytes and payload pay.
func ipPacket(v6 bool, proto byte, tcpOpt int, frag uint16, pay []byte) []byte {
	tcp := make([]byte, 20+tcpOpt+len(pay))
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 4420)
	tcp[12] = byte((20+tcpOpt)/4) << 4
	copy(tcp[20+tcpOpt:], pay)
	if v6 {
		h := make([]byte, 40)
		h[0], h[6] = 0x60, proto
		return append(h, tcp...)
	}
	h := make([]byte, 24)
	h[0], h[9] = 0x46, proto
	binary.BigEndian.PutUint16(h[6:], frag)
	return append(h, tcp...)
}

// The kernel's filter passes the segments that start with a Connect,
// alone or after an ICReq, over either IP version and whatever the TCP
// options, and nothing else; ConnectIn reads them.
func TestConnectFilter(t *testing.T) {
	raw, err := ConnectFilter()
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
	conn := connect(2, "nqn.h", "nqn.s").bytes()
	other := connect(2, "nqn.h", "nqn.s").bytes()
	other[12] = 0x04 // fctype Authentication Send
	both := append(icReq.bytes(), conn...)
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"v4 Connect", ipPacket(false, 6, 12, 0, conn), true},
		{"v6 Connect", ipPacket(true, 6, 0, 0, conn), true},
		{"ICReq then Connect", ipPacket(false, 6, 0, 0, both), true},
		{"ICReq alone", ipPacket(false, 6, 0, 0, icReq.bytes()), false},
		{"read capsule", ipPacket(false, 6, 0, 0, read(1, 1).bytes()), false},
		{"another fabrics command", ipPacket(false, 6, 0, 0, other), false},
		{"C2HData", ipPacket(false, 6, 0, 0, c2h(1, 100, FlagLast).bytes()), false},
		{"UDP", ipPacket(false, 17, 0, 0, conn), false},
		{"later fragment", ipPacket(false, 6, 0, 8, conn), false},
		{"no payload", ipPacket(false, 6, 0, 0, nil), false},
	} {
		n, err := vm.Run(tc.pkt)
		if err != nil || (n > 0) != tc.want {
			t.Errorf("%s: filter returned %d, %v; want pass %v", tc.name, n, err, tc.want)
		}
		if !tc.want || tc.name == "UDP" {
			continue
		}
		off := len(tc.pkt) - len(conn)
		if tc.name == "ICReq then Connect" {
			off -= 128
		}
		c, ok := ConnectIn(tc.pkt[off:])
		if !ok || c.QID != 2 || c.HostNQN != "nqn.h" || c.SubNQN != "nqn.s" {
			t.Errorf("%s: ConnectIn %+v %v", tc.name, c, ok)
		}
	}
	if _, ok := ConnectIn(conn[:500]); ok {
		t.Error("a Connect cut short was read")
	}
}
