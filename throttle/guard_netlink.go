package throttle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The guards' questions to the kernel, each one netlink round trip over
// a socket the guard keeps (opened on its thread, so in the backend's
// namespace): the library's calls open and close a socket per message,
// and some parse far more than a guard needs (a qdisc list decodes every
// netem leaf; an ipset list every member, and logs the skbinfo it does
// not parse).

// checkConn holds a guard's sockets, opened on first use.
type checkConn struct {
	ipset *ipsetConn
	route *nl.SocketHandle
}

func (c *checkConn) close() {
	c.ipset.close()
	c.ipset = nil
	if c.route != nil {
		c.route.Close()
		c.route = nil
	}
}

func (c *checkConn) routeSocket() (map[int]*nl.SocketHandle, error) {
	if c.route == nil {
		s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("rtnetlink socket: %w", err)
		}
		if err := errors.Join(s.SetSendTimeout(&nl.SocketTimeoutTv), s.SetReceiveTimeout(&nl.SocketTimeoutTv)); err != nil {
			s.Close()
			return nil, err
		}
		c.route = &nl.SocketHandle{Socket: s}
	}
	return map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: c.route}, nil
}

func (c *checkConn) ipsetSocket() (*ipsetConn, error) {
	if c.ipset == nil {
		s, err := newIpsetConn()
		if err != nil {
			return nil, err
		}
		c.ipset = s
	}
	return c.ipset, nil
}

// ipsetFlagListHeader is IPSET_FLAG_LIST_HEADER (ipset list -terse): a
// list that stops after each set's header, whatever its members.
const ipsetFlagListHeader = 1 << 2

// setHeader is what a guard reads of an ipset.
type setHeader struct {
	refs     uint32 // rules (iptables matches and targets) using the set
	elements uint32 // entries
}

// errNoSet is a missing set.
var errNoSet = errors.New("no such ipset")

// ipsetHeader reads set's header: how many rules use it and how many
// entries it holds. A missing set is errNoSet.
func (c *checkConn) ipsetHeader(set string) (setHeader, error) {
	conn, err := c.ipsetSocket()
	if err != nil {
		return setHeader{}, err
	}
	req := nl.NewNetlinkRequest(nl.IPSET_CMD_LIST|(unix.NFNL_SUBSYS_IPSET<<8), nl.GetIpsetFlags(nl.IPSET_CMD_LIST))
	req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(unix.AF_INET), Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(set)))
	var flags [4]byte
	binary.BigEndian.PutUint32(flags[:], ipsetFlagListHeader)
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FLAGS|int(nl.NLA_F_NET_BYTEORDER), flags[:]))
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: &conn.sh}
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if errors.Is(err, unix.ENOENT) {
		return setHeader{}, errNoSet
	}
	if err != nil {
		return setHeader{}, err
	}
	for _, m := range msgs {
		if h, ok := parseSetHeader(m); ok {
			return h, nil
		}
	}
	return setHeader{}, fmt.Errorf("ipset %s: no header in the kernel's answer", set)
}

// parseSetHeader finds the reference and element counts in one list
// message (nfgenmsg, then attributes; the counts are nested in DATA, in
// network byte order).
func parseSetHeader(m []byte) (setHeader, bool) {
	if len(m) < nl.SizeofNfgenmsg {
		return setHeader{}, false
	}
	attrs, err := nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
	if err != nil {
		return setHeader{}, false
	}
	for _, a := range attrs {
		if a.Attr.Type&nl.NLA_TYPE_MASK != nl.IPSET_ATTR_DATA {
			continue
		}
		inner, err := nl.ParseRouteAttr(a.Value)
		if err != nil {
			return setHeader{}, false
		}
		var h setHeader
		found := false
		for _, x := range inner {
			if len(x.Value) != 4 {
				continue
			}
			switch x.Attr.Type & nl.NLA_TYPE_MASK {
			case nl.IPSET_ATTR_REFERENCES:
				h.refs, found = binary.BigEndian.Uint32(x.Value), true
			case nl.IPSET_ATTR_ELEMENTS:
				h.elements = binary.BigEndian.Uint32(x.Value)
			}
		}
		return h, found
	}
	return setHeader{}, false
}

// rootQdisc is a device's root qdisc: its handle and kind (0 and "" for
// a built-in root). A device that is gone is errNoDevice.
func (c *checkConn) rootQdisc(ifindex int) (handle uint32, kind string, err error) {
	socks, err := c.routeSocket()
	if err != nil {
		return 0, "", err
	}
	// A get, not a dump: the kernel answers with the root alone. It
	// sends that answer as a notification, to the asker only with
	// NLM_F_ECHO; for a built-in root (noqueue, noop: handle 0) it sends
	// nothing at all, so the ack ends the wait.
	req := nl.NewNetlinkRequest(unix.RTM_GETQDISC, unix.NLM_F_ACK|unix.NLM_F_ECHO)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Parent: netlink.HANDLE_ROOT})
	req.Sockets = socks
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if errors.Is(err, syscall.ENODEV) {
		return 0, "", errNoDevice
	}
	if err != nil {
		return 0, "", err
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofTcMsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofTcMsg:])
		if err != nil {
			return 0, "", err
		}
		for _, a := range attrs {
			if a.Attr.Type == nl.TCA_KIND {
				kind = string(a.Value[:max(len(a.Value)-1, 0)]) // NUL-terminated
			}
		}
		return nl.DeserializeTcMsg(m).Handle, kind, nil
	}
	return 0, "", nil // a built-in root
}

// errNoDevice is a device that is gone.
var errNoDevice = errors.New("no such device")

// filterKey names one filter under a parent: its priority and handle (a
// classifier's own entry, which holds its filters, has handle 0).
type filterKey struct {
	prio   uint16
	handle uint32
}

// filters lists the filters under parent (e.g. a clsact hook) of a
// device; none when the device has no such parent (clsact deleted).
func (c *checkConn) filters(ifindex int, parent uint32) ([]filterKey, error) {
	socks, err := c.routeSocket()
	if err != nil {
		return nil, err
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETTFILTER, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Parent: parent})
	req.Sockets = socks
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWTFILTER)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
			return nil, nil // no such parent: no filters
		}
		return nil, err
	}
	out := make([]filterKey, 0, len(msgs))
	for _, m := range msgs {
		if len(m) < nl.SizeofTcMsg {
			continue
		}
		t := nl.DeserializeTcMsg(m)
		out = append(out, filterKey{prio: uint16(t.Info >> 16), handle: t.Handle})
	}
	return out, nil
}

// hasFilter says whether fs holds a filter of prio with handle (any
// handle but the classifier's own entry when handle is 0).
func hasFilter(fs []filterKey, prio uint16, handle uint32) bool {
	return slices.ContainsFunc(fs, func(f filterKey) bool {
		return f.prio == prio && (f.handle == handle || handle == 0 && f.handle != 0)
	})
}
