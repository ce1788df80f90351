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
type ipsetBatcher struct {
	fd  int
	seq uint32
	buf []byte        // a batch's messages
	rb  [1 << 16]byte // its replies
}

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
// Step i's message has sequence number base+i (the socket is ours).
func (b *ipsetBatcher) batch(steps []ipsetStep, errs []error) {
	base := b.seq + 1
	b.seq += uint32(len(steps))
	buf := b.buf[:0]
	for i, s := range steps {
		buf = appendIpsetMessage(buf, s, base+uint32(i), i == len(steps)-1)
	}
	b.buf = buf
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
	for {
		n, _, err := unix.Recvfrom(b.fd, b.rb[:], 0)
		if err != nil {
			fail(fmt.Errorf("ipset batch reply: %w", err))
			return
		}
		msgs, err := syscall.ParseNetlinkMessage(b.rb[:n])
		if err != nil {
			fail(fmt.Errorf("ipset batch reply: %w", err))
			return
		}
		for _, m := range msgs {
			i := int(m.Header.Seq - base)
			if i < 0 || i >= len(steps) || m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			if errno := -int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
				err := error(syscall.Errno(errno))
				if errno >= nl.IPSET_ERR_PRIVATE {
					err = nl.IPSetError(uintptr(errno))
				}
				errs[i] = fmt.Errorf("%s %v in %s: %w", map[bool]string{true: "add", false: "delete"}[steps[i].add], steps[i].a, steps[i].set, err)
			}
			if i == len(steps)-1 {
				return
			}
		}
	}
}

// appendIpsetMessage appends s as vishvananda/netlink's IpsetAdd and
// IpsetDel make it (exclusive: adding a member or deleting a non-member
// fails), acked when ack is set, with sequence number seq; encoded here
// because the library's attribute tree costs more than the kernel's add.
func appendIpsetMessage(buf []byte, s ipsetStep, seq uint32, ack bool) []byte {
	ne := binary.NativeEndian
	attr := func(b []byte, typ uint16, n int) []byte { // header of an attribute of n bytes
		return ne.AppendUint16(ne.AppendUint16(b, uint16(4+n)), typ)
	}
	typ := uint16(nl.IPSET_CMD_DEL)
	if s.add {
		typ = nl.IPSET_CMD_ADD
	}
	flags := uint16(unix.NLM_F_REQUEST | unix.NLM_F_EXCL)
	if ack {
		flags |= unix.NLM_F_ACK
	}
	ip, ipType := s.a.AsSlice(), uint16(nl.IPSET_ATTR_IPADDR_IPV4)
	if s.a.Is6() {
		ipType = nl.IPSET_ATTR_IPADDR_IPV6
	}
	start := len(buf)
	pad := func(b []byte) []byte { return append(b, make([]byte, (start-len(b))&3)...) }
	buf = ne.AppendUint32(buf, 0) // length, set below
	buf = ne.AppendUint16(ne.AppendUint16(buf, typ|unix.NFNL_SUBSYS_IPSET<<8), flags)
	buf = ne.AppendUint32(ne.AppendUint32(buf, seq), 0)
	buf = append(buf, unix.AF_NETLINK, nl.NFNETLINK_V0, 0, 0) // nfgenmsg
	buf = append(attr(buf, nl.IPSET_ATTR_PROTOCOL, 1), nl.IPSET_PROTOCOL, 0, 0, 0)
	buf = pad(append(append(attr(buf, nl.IPSET_ATTR_SETNAME, len(s.set)+1), s.set...), 0))
	buf = attr(buf, nl.IPSET_ATTR_DATA|nl.NLA_F_NESTED, 4+4+len(ip)+8)
	buf = attr(buf, nl.IPSET_ATTR_IP|nl.NLA_F_NESTED, 4+len(ip))
	buf = append(attr(buf, ipType|nl.NLA_F_NET_BYTEORDER, len(ip)), ip...)
	buf = append(attr(buf, nl.IPSET_ATTR_LINENO|nl.NLA_F_NET_BYTEORDER, 4), 0, 0, 0, 0)
	ne.PutUint32(buf[start:], uint32(len(buf)-start))
	return buf
}
