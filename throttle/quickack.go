package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Why the target acknowledges at once while it delays. A delay backend
// holds the target's replies to a throttled consumer (R2Ts, SCSI status,
// read data). The target's TCP, in its delayed-ACK mode for a
// request-response peer, acknowledges a writer's last segments by
// piggybacking the ACK on its next reply, so that ACK is held with the
// reply. The writer's srtt is learnt from the ACKs that are not held
// (sub-millisecond on a SAN), and its tail-loss probe fires 2·srtt + 2 ms
// after its last segment: any held ACK past that draws a spurious probe
// (lab, delay-sweep with twelve writers, delays stepped 0-40 ms: 38
// retransmissions, all DSACKed probes). The route metric quickack makes
// the target's TCP acknowledge every segment at once on the routes that
// carry it, so no ACK ever rides on a held reply: the same sweep had 0,
// its rates unchanged (results/delay-sweep/streams12-quickack-dce0cae).
// It costs at most one ACK per segment instead of per two.
//
// Only the connected routes of the consumers' interface get it (kernel
// routes without a gateway, main table): a metric change on them moves no
// traffic, and consumers behind a router keep delayed ACKs. Restore puts
// back what it changed; after a crash the metric stays, which changes
// nothing but the ACK count (the operator's `ip route change ...
// quickack 0` undoes it, and a route the kernel re-creates comes without).

// QuickAck is the quickack metric set on an interface's connected routes.
type QuickAck struct {
	routes []netlink.Route
	log    *slog.Logger
}

// EnableQuickAck sets the quickack metric on device's connected routes
// that do not have it, and says which in the log.
func EnableQuickAck(device string, log *slog.Logger) (*QuickAck, error) {
	log = cmp.Or(log, slog.Default())
	l, err := netlink.LinkByName(device)
	if err != nil {
		return nil, fmt.Errorf("quickack: device %s: %w", device, err)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("quickack: routes of %s: %w", device, err)
	}
	q := &QuickAck{log: log}
	for _, r := range routes {
		if !connectedRoute(r) || r.QuickACK != 0 {
			continue
		}
		on := r
		on.QuickACK = 1
		if err := netlink.RouteChange(&on); err != nil {
			return nil, errors.Join(fmt.Errorf("quickack on %v dev %s: %w", r.Dst, device, err), q.Restore())
		}
		q.routes = append(q.routes, on)
		log.Info("quickack on: the target acknowledges consumers' segments at once, so no ACK waits behind a delayed reply", "route", r.Dst.String(), "device", device)
	}
	return q, nil
}

// connectedRoute is a kernel route to a prefix on the link: no gateway,
// no multipath, unicast, not IPv6's link-local fe80::/64 (no target
// serves on it).
func connectedRoute(r netlink.Route) bool {
	return r.Protocol == unix.RTPROT_KERNEL && r.Gw == nil && len(r.MultiPath) == 0 && r.Dst != nil && r.Type == unix.RTN_UNICAST &&
		!r.Dst.IP.IsLinkLocalUnicast()
}

// Restore removes the metric from the routes it was set on; a nil
// QuickAck, or one already restored, does nothing.
func (q *QuickAck) Restore() error {
	if q == nil {
		return nil
	}
	var errs []error
	for _, r := range q.routes {
		off := r
		off.QuickACK = 0
		if err := netlink.RouteChange(&off); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("quickack off on %v: %w", r.Dst, err))
		}
	}
	q.routes = nil
	return errors.Join(errs...)
}
