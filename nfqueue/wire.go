package nfqueue

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// This file holds the protocol's messages: the nfgenmsg header, the
// config and verdict messages, and the decoding of a queued packet. It is
// its own file because it is the byte layout of
// include/uapi/linux/netfilter/nfnetlink_queue.h and nothing else; both
// ways of using a Conn (nfqueue.go's and raw.go's) build and parse their
// messages here, so they send the same bytes.

func nlmsgAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// verdictLen is one verdict message: netlink header, nfgenmsg and the
// NFQA_VERDICT_HDR attribute.
const verdictLen = unix.NLMSG_HDRLEN + 4 + 4 + 8

// appendVerdict appends one verdict message: netlink header, nfgenmsg and
// the NFQA_VERDICT_HDR attribute (struct nfqnl_msg_verdict_hdr { be32
// verdict; be32 id; }), built by hand, as it runs once per packet.
func appendVerdict(b []byte, queue uint16, typ uint16, id uint32, v Verdict) []byte {
	b = binary.NativeEndian.AppendUint32(b, verdictLen)
	b = binary.NativeEndian.AppendUint16(b, subsysQueue<<8|typ)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST)
	b = binary.NativeEndian.AppendUint32(b, 0) // seq: no ack asked
	b = binary.NativeEndian.AppendUint32(b, 0) // portid: the kernel's
	b = append(b, nfgenmsg(unix.AF_UNSPEC, queue)...)
	b = binary.NativeEndian.AppendUint16(b, 12)
	b = binary.NativeEndian.AppendUint16(b, attrVerdictHdr)
	b = binary.BigEndian.AppendUint32(b, uint32(v))
	return binary.BigEndian.AppendUint32(b, id)
}

// nfgenmsg is struct nfgenmsg: family, version, res_id (big endian); for the
// queue subsystem res_id is the queue number.
func nfgenmsg(family uint8, queue uint16) []byte {
	b := []byte{family, nfnetlinkV0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], queue)
	return b
}

func encodeCmd(cmd uint8) []netlink.Attribute {
	// struct nfqnl_msg_config_cmd { u8 command; u8 _pad; be16 pf; }; pf is
	// ignored by kernels since 3.8 (PF_(UN)BIND are no-ops).
	return []netlink.Attribute{{Type: cfgAttrCmd, Data: []byte{cmd, 0, 0, 0}}}
}

func encodeParams(cfg Config) []netlink.Attribute {
	// struct nfqnl_msg_config_params { be32 copy_range; u8 copy_mode; } packed.
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, cfg.CopyRange)
	params[4] = copyPacket
	maxlen := binary.BigEndian.AppendUint32(nil, cfg.MaxLen)
	attrs := []netlink.Attribute{
		{Type: cfgAttrParams, Data: params},
		{Type: cfgAttrQueueMax, Data: maxlen},
	}
	if cfg.Flags != 0 {
		f := binary.BigEndian.AppendUint32(nil, cfg.Flags)
		// The mask says which flags this message sets; the same value
		// sets exactly ours and leaves the rest at their defaults.
		attrs = append(attrs,
			netlink.Attribute{Type: cfgAttrFlags, Data: f},
			netlink.Attribute{Type: cfgAttrMask, Data: f})
	}
	return attrs
}

func configMessage(queue uint16, attrs []netlink.Attribute) netlink.Message {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		// Only fixed-size attributes built above: cannot fail.
		panic(err)
	}
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(subsysQueue<<8 | msgConfig),
			Flags: netlink.Request | netlink.Acknowledge,
		},
		Data: append(nfgenmsg(unix.AF_UNSPEC, queue), b...),
	}
}

func verdictMessage(queue uint16, typ uint16, id uint32, v Verdict) netlink.Message {
	// The body appendVerdict builds for the raw path, so both paths
	// send the same bytes.
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(subsysQueue<<8 | typ),
			Flags: netlink.Request,
		},
		Data: appendVerdict(nil, queue, typ, id, v)[unix.NLMSG_HDRLEN:],
	}
}

// decodePacket parses the body (after the netlink header) of a
// NFQNL_MSG_PACKET message. It walks the attributes by hand, without
// allocating: it runs once per queued packet, and Payload points into b.
func decodePacket(b []byte) (Packet, error) {
	var p Packet
	if len(b) < 4 {
		return p, errors.New("nfqueue: packet message shorter than nfgenmsg")
	}
	gotHdr := false
	for a := b[4:]; len(a) > 0; {
		if len(a) < 4 {
			return p, errors.New("nfqueue: packet attributes: short attribute header")
		}
		l := int(binary.NativeEndian.Uint16(a))
		if l < 4 || l > len(a) {
			return p, fmt.Errorf("nfqueue: packet attributes: bad attribute length %d", l)
		}
		d := a[4:l]
		be32 := func() uint32 {
			if len(d) < 4 {
				return 0
			}
			return binary.BigEndian.Uint32(d)
		}
		switch binary.NativeEndian.Uint16(a[2:]) & (1<<14 - 1) { // strip NLA_F_NESTED/NET_BYTEORDER
		case attrPacketHdr:
			if len(d) < 7 {
				return p, errors.New("nfqueue: short NFQA_PACKET_HDR")
			}
			p.ID = binary.BigEndian.Uint32(d)
			p.HWProtocol = binary.BigEndian.Uint16(d[4:])
			p.Hook = d[6]
			gotHdr = true
		case attrMark:
			p.Mark = be32()
		case attrInDev:
			p.InDev = be32()
		case attrOutDev:
			p.OutDev = be32()
		case attrPayload:
			p.Payload = d
		case attrCapLen:
			p.CapLen = be32()
		case attrSkbInfo:
			p.SkbInfo = be32()
		}
		a = a[min(nlmsgAlign(l), len(a)):]
	}
	if !gotHdr {
		return p, errors.New("nfqueue: packet message without NFQA_PACKET_HDR")
	}
	return p, nil
}
