package throttle

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// appendIpsetMessage encodes the bytes vishvananda/netlink's IpsetAdd and
// IpsetDel send (with NLM_F_EXCL, and an ack where asked), for both
// families and set names of every padding.
func TestAppendIpsetMessage(t *testing.T) {
	for _, s := range []ipsetStep{
		{"sq.q.4", netip.MustParseAddr("10.0.0.1"), true},
		{"sqt-dl.q.4n", netip.MustParseAddr("10.232.1.2"), false},
		{"sq-x.q.6", netip.MustParseAddr("fd00::7"), true},
		{"sq-xy.q.6n", netip.MustParseAddr("fd00::8"), false},
	} {
		for _, ack := range []bool{false, true} {
			cmd, flags := nl.IPSET_CMD_DEL, unix.NLM_F_REQUEST|unix.NLM_F_EXCL
			if s.add {
				cmd = nl.IPSET_CMD_ADD
			}
			if ack {
				flags |= unix.NLM_F_ACK
			}
			req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), flags)
			req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(unix.AF_NETLINK), Version: nl.NFNETLINK_V0})
			req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
			req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(s.set)))
			typ := int(nl.NLA_F_NET_BYTEORDER) | nl.IPSET_ATTR_IPADDR_IPV4
			if s.a.Is6() {
				typ = int(nl.NLA_F_NET_BYTEORDER) | nl.IPSET_ATTR_IPADDR_IPV6
			}
			data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
			data.AddChild(nl.NewRtAttr(nl.IPSET_ATTR_IP|int(nl.NLA_F_NESTED), nl.NewRtAttr(typ, s.a.AsSlice()).Serialize()))
			data.AddChild(&nl.Uint32Attribute{Type: nl.IPSET_ATTR_LINENO | nl.NLA_F_NET_BYTEORDER, Value: 0})
			req.AddData(data)
			want := req.Serialize()
			binary.NativeEndian.PutUint32(want[8:], 42) // the sequence number
			prefix := []byte{1, 2, 3}
			got := appendIpsetMessage(prefix, s, 42, ack)
			if !bytes.Equal(got[:3], prefix) || !bytes.Equal(got[3:], want) {
				t.Errorf("%v ack=%v:\n got % x\nwant % x", s, ack, got[3:], want)
			}
		}
	}
}
