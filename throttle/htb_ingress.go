package throttle

// Write caps for the htb backend (Setting.WriteRate). A consumer's writes
// arrive on the target's ingress, where no qdisc can queue, so they are
// redirected (cls_bpf + mirred, see htb_ingress_bpf.go) to an IFB device
// whose egress carries an HTB tree like the egress one: root and default
// class at the link rate, one class per capped writer. On the IFB,
// packets are classified by source address with u32: marks set by
// iptables come later (PREROUTING runs when the IFB hands the packet back
// to the stack), and this kernel has no cls_fw anyway.
//
// Everything is created on the first WriteRate, so a read-only htb user
// gets no IFB and no ingress qdisc, and removed by CleanupTC (Close, the
// next start after a crash, `sanqos cleanup`), found by name: the IFB's
// name derives from the label, the redirect filter carries the label.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ifbName is the IFB device of a label: interface names have 15 bytes at
// most, labels up to 20, so the name carries a hash of the label.
func ifbName(label string) string {
	h := fnv.New32a()
	h.Write([]byte(label))
	return fmt.Sprintf("sqifb%08x", h.Sum32())
}

// ingressFilterName labels the redirect filter (TCA_BPF_NAME).
func ingressFilterName(label string) string { return tcComment(label) }

// ingressMaxMinor keeps consumer minors inside u32's 12-bit node ids.
const ingressMaxMinor = 0xfff

// ingressConnections is how many of a writer's TCP connections one leaf
// is sized for: an iSCSI initiator opens one per session (per target
// portal and LUN group), rarely more than a handful.
const ingressConnections = 8

// ingressLeafBytes is the bfifo limit of a write-capped consumer's class.
// The qdisc must never drop: a drop is a retransmission the throttle
// caused. What a TCP sender can have in flight towards us is bounded by
// the window we advertise, at most our receive buffer (tcp_rmem's
// maximum; the default 6 MiB), so a leaf that holds that much per
// connection, plus headers (66 bytes per 1448 of payload, under 5 %;
// round up to 1/16), can never overflow however slow the class:
// the senders stop when their windows are full. Eight connections at the
// default make 51 MiB; the memory is only used while a writer sends
// faster than its cap, and bounded by what the socket buffers would hold
// anyway.
func ingressLeafBytes(rmemMax uint64) uint32 {
	b := rmemMax * ingressConnections
	b += b / 16
	return uint32(min(max(b, tcLeafBytes), 1<<31))
}

// tcpRmemMax reads the receive buffer maximum of the current network
// namespace (sysctls are per namespace), 6 MiB if unreadable.
func tcpRmemMax() uint64 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_rmem")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if v, err := strconv.ParseUint(f[2], 10, 64); err == nil && v > 0 {
				return v
			}
		}
	}
	return 6 << 20
}

// htbIngress is the write-cap half of an HTB backend; its methods run
// under the backend's lock.
type htbIngress struct {
	label    string
	ifidx    int // the device whose ingress is redirected
	ifb      int
	major    uint16
	linkRate uint64
	leaf     uint32
	cfg      *HTBConfig
	lease    *ingressLease
	redirect ingressRedirectSpec

	cur   map[netip.Addr]htbConsumer
	minor map[uint16]bool
}

// ingressParent returns the filter parent of the device's ingress hook,
// adding a clsact qdisc when there is none (then also returned, so a
// failed start can remove it). Someone else's ingress or clsact qdisc is
// shared: filters of other priorities coexist.
func ingressParent(link netlink.Link) (uint32, netlink.Qdisc, error) {
	qs, err := netlink.QdiscList(link)
	if err != nil {
		return 0, nil, err
	}
	for _, q := range qs {
		switch q.Type() {
		case "clsact":
			return netlink.HANDLE_MIN_INGRESS, nil, nil
		case "ingress":
			return netlink.MakeHandle(0xffff, 0), nil, nil
		}
	}
	q := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := netlink.QdiscAdd(q); err != nil {
		return 0, nil, fmt.Errorf("add clsact qdisc: %w", err)
	}
	return netlink.HANDLE_MIN_INGRESS, q, nil
}

// newHTBIngress builds IFB, tree, lease and redirect; on error it removes
// what it made.
func newHTBIngress(cfg *HTBConfig, ifidx int) (_ *htbIngress, err error) {
	g := &htbIngress{label: cfg.Label, ifidx: ifidx, major: tcRootMajor(cfg.Label), linkRate: cfg.LinkRate,
		leaf: ingressLeafBytes(tcpRmemMax()), cfg: cfg, cur: map[netip.Addr]htbConsumer{}, minor: map[uint16]bool{}}
	var added netlink.Qdisc // a clsact we added
	defer func() {
		if err != nil {
			g.lease.close()
			if cerr := tcCleanupIngress(cfg.Label); cerr != nil {
				err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
			}
			// Without our filter in it, cleanup cannot tell it is ours.
			if added != nil {
				if qerr := netlink.QdiscDel(added); qerr != nil && !errors.Is(qerr, syscall.ENOENT) && !errors.Is(qerr, syscall.EINVAL) {
					err = errors.Join(err, fmt.Errorf("cleanup: delete clsact: %w", qerr))
				}
			}
		}
	}()
	la := netlink.NewLinkAttrs()
	la.Name = ifbName(cfg.Label)
	// The IFB's own queue is only a hand-off to its qdisc, which holds
	// the packets; the length matters only when no qdisc is attached.
	la.TxQLen = 1000
	if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: la}); err != nil {
		return nil, fmt.Errorf("add ifb %s: %w", la.Name, err)
	}
	ifb, err := netlink.LinkByName(la.Name)
	if err != nil {
		return nil, err
	}
	g.ifb = ifb.Attrs().Index
	// The alias says who owns the device to anyone reading `ip link`.
	if err := netlink.LinkSetAlias(ifb, tcComment(cfg.Label)); err != nil {
		return nil, fmt.Errorf("label ifb: %w", err)
	}
	root := netlink.MakeHandle(g.major, htbRootMinor)
	if err := netlink.QdiscAdd(tcRootQdisc(g.ifb, g.major, htbDefaultMinor)); err != nil {
		return nil, fmt.Errorf("add ifb root htb: %w", err)
	}
	for _, c := range []*netlink.HtbClass{
		tcHtbClass(g.ifb, root, netlink.MakeHandle(g.major, 0), g.linkRate, g.linkRate, 0),
		tcHtbClass(g.ifb, netlink.MakeHandle(g.major, htbDefaultMinor), root, g.linkRate, g.linkRate, 0),
	} {
		if err := netlink.ClassAdd(c); err != nil {
			return nil, fmt.Errorf("add ifb class %s: %w", tcHandleString(c.Handle), err)
		}
	}
	// The default class sees what is redirected but not classified (a
	// consumer between its lease and its u32 filter): it must not drop
	// either, and an IFB's default pfifo is 32 packets.
	if err := tcAddFifoLeaf(g.ifb, netlink.MakeHandle(g.major, htbDefaultMinor), 0, g.leaf); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(ifb); err != nil {
		return nil, fmt.Errorf("ifb up: %w", err)
	}
	if g.lease, err = newIngressLease(ingressMaxMinor, cfg.Port); err != nil {
		return nil, err
	}
	link, err := netlink.LinkByIndex(ifidx)
	if err != nil {
		return nil, err
	}
	parent, added, err := ingressParent(link)
	if err != nil {
		return nil, err
	}
	g.redirect = ingressRedirectSpec{Ifindex: ifidx, Parent: parent, Prio: tcRootMajor(cfg.Label),
		Name: ingressFilterName(cfg.Label), ProgFD: g.lease.progFD, IFBIndex: g.ifb}
	if err := g.redirect.add(); err != nil {
		return nil, err
	}
	cfg.Log.Info("htb write caps ready", "device", cfg.Device, "ifb", la.Name, "leaf_bytes", g.leaf)
	return g, nil
}

// u32 matches a consumer's source address on the IFB; handle 800::minor
// so it can be deleted without listing.
func (g *htbIngress) u32(a netip.Addr, minor uint16) *netlink.U32 {
	b := a.Unmap().As4()
	return &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: g.ifb, Parent: netlink.MakeHandle(g.major, 0),
			Priority: tcFilterPrio, Protocol: unix.ETH_P_IP, Handle: 0x80000000 | uint32(minor)&0xfff},
		ClassId: netlink.MakeHandle(g.major, minor),
		Sel: &netlink.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Keys: []netlink.TcU32Key{
			{Mask: 0xffffffff, Val: binary.BigEndian.Uint32(b[:]), Off: 12}, // IPv4 source address
		}},
	}
}

func (g *htbIngress) class(minor uint16, rate uint64) *netlink.HtbClass {
	ceil := min(uint64(float64(rate)*g.cfg.CeilFactor), max(g.linkRate, rate))
	return tcHtbClass(g.ifb, netlink.MakeHandle(g.major, minor), netlink.MakeHandle(g.major, htbRootMinor), rate, ceil, g.cfg.Prio)
}

func (g *htbIngress) allocMinor() (uint16, error) {
	for m := uint16(htbFirstConsumer); m <= ingressMaxMinor; m++ {
		if !g.minor[m] {
			return m, nil
		}
	}
	return 0, fmt.Errorf("htb: all %d write-cap classes in use", ingressMaxMinor-htbFirstConsumer+1)
}

func (g *htbIngress) deadline() uint64 { return monoNow() + uint64(g.cfg.MarkTTL) }

// apply takes the listed consumers to their write rates (0 removes); on
// error it undoes its own changes.
func (g *htbIngress) apply(next map[netip.Addr]uint64) error {
	var undo undoLog
	done := map[netip.Addr]htbConsumer{}
	for a, rate := range next {
		old, had := g.cur[a]
		switch {
		case had && rate == old.rate:
			done[a] = old
		case had && rate != 0:
			if err := netlink.ClassChange(g.class(old.minor, rate)); err != nil {
				return undo.rollback(fmt.Errorf("htb: change write class of %v: %w", a, err))
			}
			undo.add(func() error { return netlink.ClassChange(g.class(old.minor, old.rate)) })
			done[a] = htbConsumer{old.minor, rate}
		case had:
			if err := g.remove(a, old); err != nil {
				return undo.rollback(err)
			}
			undo.add(func() error { return g.add(a, old) })
		case rate != 0:
			m, err := g.allocMinor()
			if err != nil {
				return undo.rollback(err)
			}
			c := htbConsumer{m, rate}
			if err := g.add(a, c); err != nil {
				return undo.rollback(err)
			}
			undo.add(func() error { return g.remove(a, c) })
			done[a] = c
		}
	}
	for a := range next {
		if c, ok := done[a]; ok {
			g.cur[a] = c
		} else {
			delete(g.cur, a)
		}
	}
	return nil
}

// add creates class, leaf and u32 filter, then the lease that starts the
// redirect, so a redirected packet always finds its class.
func (g *htbIngress) add(a netip.Addr, c htbConsumer) (err error) {
	g.minor[c.minor] = true
	var undo undoLog
	defer func() {
		if err != nil {
			err = undo.rollback(err)
			delete(g.minor, c.minor)
		}
	}()
	cl := g.class(c.minor, c.rate)
	if err := netlink.ClassAdd(cl); err != nil {
		return fmt.Errorf("htb: add write class for %v: %w", a, err)
	}
	undo.add(func() error { return netlink.ClassDel(cl) })
	if err := tcAddFifoLeaf(g.ifb, cl.Handle, 0, g.leaf); err != nil {
		return err
	}
	f := g.u32(a, c.minor)
	if err := netlink.FilterAdd(f); err != nil {
		return fmt.Errorf("htb: add u32 filter for %v: %w", a, err)
	}
	undo.add(func() error { return netlink.FilterDel(f) })
	return g.lease.put(a, g.deadline())
}

// remove reverses add without dropping or reordering: the class opens to
// the link rate and drains before the lease ends (after which the
// consumer's packets bypass the IFB, so anything still queued there would
// arrive after them), and the class goes once empty again.
func (g *htbIngress) remove(a netip.Addr, c htbConsumer) error {
	fast := g.class(c.minor, max(g.linkRate, c.rate))
	if err := netlink.ClassChange(fast); err != nil {
		return fmt.Errorf("htb: open write class of %v: %w", a, err)
	}
	waitClassEmpty(g.ifb, fast.Handle)
	if err := g.lease.del(a); err != nil {
		return err
	}
	waitClassEmpty(g.ifb, fast.Handle)
	if err := netlink.FilterDel(g.u32(a, c.minor)); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("htb: delete u32 filter of %v: %w", a, err)
	}
	if err := netlink.ClassDel(fast); err != nil {
		return fmt.Errorf("htb: delete write class of %v: %w", a, err)
	}
	delete(g.minor, c.minor)
	return nil
}

// refresh pushes every lease's deadline one TTL ahead.
func (g *htbIngress) refresh() error {
	var errs []error
	d := g.deadline()
	for a := range g.cur {
		if err := g.lease.put(a, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ifbDrops sums the drops of the IFB's qdiscs (root and leaves), for
// tests and metrics.
func ifbDrops(label string) (uint32, error) {
	l, err := netlink.LinkByName(ifbName(label))
	if err != nil {
		return 0, err
	}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		return 0, err
	}
	var n uint32
	for _, q := range qs {
		if s := q.Attrs().Statistics; s != nil && s.Queue != nil {
			n += s.Queue.Drops
		}
	}
	return n, nil
}

// waitClassEmpty polls a class's queue length until it is empty, for at
// most 100 ms: at link rate even a full leaf drains in a fraction of that.
func waitClassEmpty(ifindex int, handle uint32) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return
	}
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
		cls, err := netlink.ClassList(link, netlink.HANDLE_NONE)
		if err != nil {
			return
		}
		busy := false
		for _, k := range cls {
			if k.Attrs().Handle == handle && k.Attrs().Statistics != nil && k.Attrs().Statistics.Queue != nil {
				busy = k.Attrs().Statistics.Queue.Qlen > 0
			}
		}
		if !busy {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// tcCleanupIngress removes label's redirect filters (from every device's
// ingress), then its IFB, in that order: a mirred action whose target
// device is gone drops what it redirects. A clsact or ingress qdisc left
// without any filter is removed too: it does nothing, and it is ours in
// all likelihood (we add one when there is none).
func tcCleanupIngress(label string) error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var errs []error
	name := ingressFilterName(label)
	for _, l := range links {
		qs, err := netlink.QdiscList(l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, q := range qs {
			var parent uint32
			switch q.Type() {
			case "clsact":
				parent = netlink.HANDLE_MIN_INGRESS
			case "ingress":
				parent = netlink.MakeHandle(0xffff, 0)
			default:
				continue
			}
			fs, err := netlink.FilterList(l, parent)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			left, ours := 0, 0
			for _, f := range fs {
				if b, ok := f.(*netlink.BpfFilter); ok && b.Name == name {
					ours++
					if err := netlink.FilterDel(f); err != nil && !errors.Is(err, syscall.ENOENT) {
						errs = append(errs, fmt.Errorf("delete redirect filter on %s: %w", l.Attrs().Name, err))
						left++
					}
					continue
				}
				left++
			}
			if q.Type() == "clsact" {
				// clsact's egress hook may hold someone's filters too.
				if eg, err := netlink.FilterList(l, netlink.HANDLE_MIN_EGRESS); err != nil || len(eg) > 0 {
					left++
				}
			}
			if left == 0 && ours > 0 {
				if err := netlink.QdiscDel(q); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EINVAL) {
					errs = append(errs, fmt.Errorf("delete %s qdisc on %s: %w", q.Type(), l.Attrs().Name, err))
				}
			}
		}
	}
	if l, err := netlink.LinkByName(ifbName(label)); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete ifb %s: %w", l.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}
