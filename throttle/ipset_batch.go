package throttle

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ipsetStep is one member added to a set, or deleted from it.
type ipsetStep struct {
	set string
	a   netip.Addr
	add bool
}

// ipsetBatcher sends ipset adds and deletes many to a system call, over a
// netlink socket of its own made in the namespace it is created in (the
// agent's): a message and a round trip per member cost 156 ms for 10,000
// members. The kernel takes a sendmsg's messages one by one, in order,
// before the call returns, and replies only to those that fail and to
// the last, which asks for an acknowledgement: so each step has its own
// error, and the last reply says the batch is done.
type ipsetBatcher struct{ fd int }

// ipsetBatchLen is how many messages go in one sendmsg: the replies of a
// batch that fails whole (about 100 bytes each) fit the socket's receive
// buffer.
const ipsetBatchLen = 512

func newIpsetBatcher() (*ipsetBatcher, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	tv := unix.Timeval{Sec: 2} // the replies are queued before sendmsg returns
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink socket timeout: %w", err)
	}
	return &ipsetBatcher{fd: fd}, nil
}

func (b *ipsetBatcher) close() error { return unix.Close(b.fd) }

// run makes the steps and returns each one's error (nil: done).
func (b *ipsetBatcher) run(steps []ipsetStep) []error {
	errs := make([]error, len(steps))
	for lo := 0; lo < len(steps); lo += ipsetBatchLen {
		hi := min(lo+ipsetBatchLen, len(steps))
		b.batch(steps[lo:hi], errs[lo:hi])
	}
	return errs
}

// batch sends one sendmsg of steps and reads its replies into errs. A
// step whose outcome is unknown (the send or a read failed) has an error:
// the caller undoes it, which fails harmlessly where it was not made.
func (b *ipsetBatcher) batch(steps []ipsetStep, errs []error) {
	var buf []byte
	at := make(map[uint32]int, len(steps))
	var last uint32
	for i, s := range steps {
		msg, seq := ipsetMessage(s, i == len(steps)-1)
		buf, at[seq], last = append(buf, msg...), i, seq
	}
	fail := func(err error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	if err := unix.Sendto(b.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		fail(fmt.Errorf("ipset batch: %w", err))
		return
	}
	rb := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(b.fd, rb, 0)
		if err != nil {
			fail(fmt.Errorf("ipset batch reply: %w", err))
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			fail(fmt.Errorf("ipset batch reply: %w", err))
			return
		}
		for _, m := range msgs {
			i, ours := at[m.Header.Seq]
			if !ours || m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			if errno := -int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
				err := error(syscall.Errno(errno))
				if errno >= nl.IPSET_ERR_PRIVATE {
					err = nl.IPSetError(uintptr(errno))
				}
				errs[i] = fmt.Errorf("%s %v in %s: %w", map[bool]string{true: "add", false: "delete"}[steps[i].add], steps[i].a, steps[i].set, err)
			}
			if m.Header.Seq == last {
				return
			}
		}
	}
}

// ipsetMessage is s as vishvananda/netlink's IpsetAdd and IpsetDel make
// it (exclusive: adding a member or deleting a non-member fails), acked
// when ack is set, and its sequence number.
func ipsetMessage(s ipsetStep, ack bool) ([]byte, uint32) {
	cmd := nl.IPSET_CMD_DEL
	if s.add {
		cmd = nl.IPSET_CMD_ADD
	}
	flags := unix.NLM_F_REQUEST | unix.NLM_F_EXCL
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
	return req.Serialize(), req.Seq
}
