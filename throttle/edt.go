package throttle

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func init() {
	Register(Entry{Name: "edt", Rank: 10, Auto: true, AutoHas: "fq and tc BPF",
		About: "kernel delay: tc BPF departure times, fq holds each packet",
		Caps:  Caps{Delay: true, IPv6: true}, Parts: PartDevice | PartBPF,
		Needs:   func(WriteOn) [][]Feature { return edtNeeds },
		Probes:  edtNeeds,
		Objects: []Objects{{"-edt", CleanupEDT}},
		Probe:   func() (bool, string, error) { ok, why := EDTAvailable(); return ok, why, nil },
		Build:   newEDTFrom})
}

func newEDTFrom(o Options, w WriteOn) (Throttle, error) {
	c, err := o.tc("-edt")
	if err != nil {
		return nil, err
	}
	return NewEDT(EDTConfig{tcConfig: c, WriteOn: w})
}

var edtNeeds = append([][]Feature{{{"fq", "fq qdisc (releases each packet at its time)", "CONFIG_NET_SCH_FQ", "sch_fq"}}}, needBPF...)

// EDT is the delay backend at kernel speed: the earliest-departure-time
// model that Linux TCP pacing itself uses. A tc BPF program on the target
// interface's egress stamps each segment to a throttled consumer with
// skb->tstamp = now + its delay, and the fq qdisc at the root releases
// every packet at its time. No packet crosses into userspace: a
// consumer's delay is one BPF map update, the per-packet cost two map
// lookups. A timestamp the sender's own pacing set later than ours is
// kept.
//
// fq releases a flow's packets in the order of their timestamps, not of
// their arrival: a packet stamped earlier than the flow's last goes
// ahead of it. So when a consumer's delay falls (a step down, or cleared)
// its newer segments would overtake the older ones still held, and the
// receiver's duplicate ACKs would draw spurious retransmissions from the
// target (in the stock-kernel guest, 30 falls of a stream's delay: 6,122
// segments out of order and 501 retransmitted; the lab's autonomic runs
// showed 22–26 target-side retransmissions per phase). The program
// therefore keeps each consumer's latest departure time (last) and never
// stamps a segment with payload earlier, also after its delay is gone:
// a consumer's segments leave in the order they came. Pure ACKs are not
// held back this way; one that overtakes data is harmless.
//
// Which packets carry which delay follows WriteOn, as in the delay line:
// segments with payload take the read delay, and with replies (default)
// the larger of read and write; pure ACKs take the write delay only with
// acks.
//
// Fail-open as the write caps: tc objects outlive the process, so the
// program delays only while a heartbeat the backend refreshes lies in the
// future; a dead agent's delays end within TTL.
//
// IPv4 and IPv6 consumers alike: each family has its maps, and the
// program parses both (IPv6 without extension headers, which the
// target's own TCP does not send). A kernel that refuses the IPv6 part
// gets the IPv4 program alone, and Set names the IPv6 consumers it then
// cannot delay (RefusedError) without holding back the others.
//
// It needs sch_fq (CONFIG_NET_SCH_FQ) and BPF; EDTAvailable says whether
// this kernel has both.
type EDT struct {
	cfg    EDTConfig
	major  uint16
	dev    netlink.Link
	hook   *clsactHook
	*guard // puts fq and the filter back when someone removes them (Reinstalls)

	bpfObjects           // consumers: IPv4 (host order) → {read ns, write ns}
	last       *ebpf.Map // IPv4 (host order) → latest departure (ns, CLOCK_MONOTONIC)
	// The same for IPv6 consumers, keyed by the 16 bytes of the address
	// in network order; nil where the kernel refused the program's IPv6
	// part (build).
	consumers6, last6 *ebpf.Map

	mu  sync.Mutex
	cur map[netip.Addr]Setting
}

// EDTConfig configures EDT.
type EDTConfig struct {
	tcConfig
	WriteOn WriteOn
	// noIPv6 loads the IPv4 program alone, as on a kernel that refuses
	// the IPv6 part (tests).
	noIPv6 bool
}

// ErrNoFq is returned (wrapped) when the kernel has no fq qdisc.
var ErrNoFq = errors.New("kernel has no fq qdisc (CONFIG_NET_SCH_FQ)")

// fq's limits. A delayed flow queues what its sender has in flight below
// TCP, which TCP Small Queues bound (tcp_limit_output_bytes, ~1–4 MB: a
// few thousand segments, far fewer with GSO); fq's default of 100 packets
// per flow would drop a delayed read, so both limits are raised well past
// it. The horizon (how far ahead a timestamp may lie) is set above
// MaxDelay, and beyond it fq caps instead of dropping.
const (
	edtFlowLimit  = 10000
	edtLimit      = 100000
	edtHorizonUS  = 1000000
	edtFilterPrio = 13
)

// NewEDT replaces the device's root qdisc with fq and attaches the
// program; on error nothing remains. A root qdisc that is neither a
// kernel default nor fq is someone's configuration: it is refused, not
// replaced.
func NewEDT(cfg EDTConfig) (*EDT, error) {
	if err := cfg.defaults("edt"); err != nil {
		return nil, err
	}
	dev, err := netlink.LinkByName(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("edt: device %q: %w", cfg.Device, err)
	}
	if err := CleanupEDT(cfg.Label); err != nil {
		return nil, fmt.Errorf("edt: remove stale objects of label %s: %w", cfg.Label, err)
	}
	e := &EDT{cfg: cfg, major: tcRootMajor(cfg.Label), dev: dev, cur: map[netip.Addr]Setting{},
		hook: &clsactHook{ifindex: dev.Attrs().Index, dev: cfg.Device}}
	if err := e.build(); err != nil {
		e.close()
		if cerr := errors.Join(CleanupEDT(cfg.Label), e.hook.release()); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup after failed start: %w", cerr))
		}
		return nil, fmt.Errorf("edt on %s: %w", cfg.Device, err)
	}
	e.lease.start()
	e.guard = startGuard(&guard{what: "edt", interval: cfg.Check, log: cfg.Log, check: e.check, repair: e.repair})
	cfg.Log.Info("edt throttle ready", "device", cfg.Device, "root", tcHandleString(netlink.MakeHandle(e.major, 0)), "write_delay_on", cfg.WriteOn, "ipv6", e.consumers6 != nil)
	return e, nil
}

// replaceableRoot reports whether a root qdisc is one the kernel attached
// by itself (or plain fq), which EDT may take over and give back.
func replaceableRoot(kind string) bool {
	switch kind {
	case "noqueue", "pfifo_fast", "mq", "fq_codel", "fq":
		return true
	}
	return false
}

func (e *EDT) build() error {
	if err := e.fqRoot(); err != nil {
		return err
	}
	raiseMemlock(e.cfg.Log)
	var err error
	if e.consumers, e.last, err = edtMapPair(4, 4); err != nil {
		return err
	}
	if e.lease, err = newBPFLease(e.cfg.TTL, e.cfg.Log, "edt delays"); err != nil {
		return err
	}
	v4 := edtMaps{delays: e.consumers.FD(), last: e.last.FD()}
	if !e.cfg.noIPv6 {
		if e.prog, err = e.loadWithIPv6(v4); err != nil {
			// Refused by this kernel: IPv4 alone, and say so once here;
			// Set names each IPv6 consumer it then leaves undelayed.
			e.cfg.Log.Warn("edt: the kernel refused the IPv6 part of the program; IPv6 consumers will not be delayed", "err", err)
		}
	}
	if e.prog == nil {
		if e.prog, err = e.load(v4, nil); err != nil {
			return fmt.Errorf("load program: %w", err)
		}
	}
	return e.attach()
}

// edtMapPair makes one family's maps: its consumers' delays and their
// latest departures, keyed by keySize-byte addresses.
func edtMapPair(family int, keySize uint32) (delays, last *ebpf.Map, err error) {
	if delays, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: keySize, ValueSize: 16, MaxEntries: 65536}); err != nil {
		return nil, nil, fmt.Errorf("bpf map (IPv%d delays): %w", family, err)
	}
	if last, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: keySize, ValueSize: 8, MaxEntries: 65536}); err != nil {
		delays.Close()
		return nil, nil, fmt.Errorf("bpf map (IPv%d departures): %w", family, err)
	}
	return delays, last, nil
}

// loadWithIPv6 makes the IPv6 maps and loads the program for both
// families; on error it leaves no IPv6 map behind.
func (e *EDT) loadWithIPv6(v4 edtMaps) (*ebpf.Program, error) {
	var err error
	if e.consumers6, e.last6, err = edtMapPair(6, 16); err != nil {
		return nil, err
	}
	prog, err := e.load(v4, &edtMaps{delays: e.consumers6.FD(), last: e.last6.FD()})
	if err != nil {
		e.consumers6.Close()
		e.last6.Close()
		e.consumers6, e.last6 = nil, nil
	}
	return prog, err
}

func (e *EDT) load(v4 edtMaps, v6 *edtMaps) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sanqos_edt", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: edtProgram(e.cfg.Ports, e.cfg.WriteOn, v4, v6, e.lease.m.FD())})
}

// fqRoot makes fq with our handle the device's root, unless the root is
// someone's configuration.
func (e *EDT) fqRoot() error {
	qs, err := netlink.QdiscList(e.dev)
	if err != nil {
		return err
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT && !replaceableRoot(q.Type()) {
			return fmt.Errorf("root qdisc %s %s is someone's configuration; remove it or pick another backend", q.Type(), tcHandleString(q.Attrs().Handle))
		}
	}
	fq := netlink.NewFq(netlink.QdiscAttrs{LinkIndex: e.dev.Attrs().Index, Handle: netlink.MakeHandle(e.major, 0), Parent: netlink.HANDLE_ROOT})
	fq.FlowPacketLimit, fq.PacketLimit, fq.Horizon, fq.HorizonDropPolicy = edtFlowLimit, edtLimit, edtHorizonUS, netlink.HORIZON_DROP_POLICY_CAP
	if err := netlink.QdiscReplace(fq); err != nil {
		if tcKindMissing(err) {
			return ErrNoFq
		}
		return fmt.Errorf("fq root: %w", err)
	}
	return nil
}

// attach hangs the program from the clsact's egress hook (adding the
// clsact if the device has none).
func (e *EDT) attach() error {
	if err := e.hook.ensure(); err != nil {
		return err
	}
	f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: e.dev.Attrs().Index, Parent: netlink.HANDLE_MIN_EGRESS,
		Handle: uint32(e.major), Protocol: unix.ETH_P_ALL, Priority: edtFilterPrio}, Fd: e.prog.FD(), Name: "sanqos_edt", DirectAction: true}
	if err := netlink.FilterAdd(f); err != nil {
		return fmt.Errorf("attach program: %w", err)
	}
	return nil
}

// Name implements Throttle.
func (e *EDT) Name() string { return "edt" }

// Set implements Throttle. An IPv6 consumer is delayed through the IPv6
// maps; where the kernel could not load that part of the program, the
// IPv4 consumers of the batch are applied and the IPv6 ones it would
// delay are named in a RefusedError. A failed map update puts back what
// the batch had applied: all or nothing.
func (e *EDT) Set(settings map[netip.Addr]Setting) error {
	if err := validateFor("edt", Caps{Delay: true}, settings); err != nil {
		return err
	}
	batch, refused := edtSplit(settings, e.consumers6 != nil)
	e.mu.Lock()
	defer e.mu.Unlock()
	var done []netip.Addr
	for a, s := range batch {
		if err := e.put(a, s); err != nil {
			for _, b := range done {
				_ = e.put(b, e.cur[b]) // zero where it had none
			}
			return fmt.Errorf("edt: consumer %v: %w", a, err)
		}
		done = append(done, a)
	}
	for a, s := range batch {
		if s.IsZero() {
			delete(e.cur, a)
		} else {
			e.cur[a] = s
		}
	}
	if err := e.lease.refresh(); err != nil {
		return err
	}
	return refused.err()
}

// edtSplit is Set's batch by address family: with the IPv6 part loaded
// (v6) every consumer goes ahead; without it the IPv6 ones with a delay
// are refused. Addresses come back as edt keys them: unmapped, no zone.
func edtSplit(settings map[netip.Addr]Setting, v6 bool) (map[netip.Addr]Setting, *refusals) {
	if !v6 {
		return only4("edt", settings, func(s Setting) bool { return !s.IsZero() }, errEDTNoIPv6)
	}
	out := make(map[netip.Addr]Setting, len(settings))
	for a, s := range settings {
		out[plainAddr(a)] = s
	}
	return out, &refusals{backend: "edt"}
}

// errEDTNoIPv6 is why edt cannot delay an IPv6 consumer on a kernel that
// refused the program's IPv6 part.
var errEDTNoIPv6 = fmt.Errorf("IPv6: this kernel refused edt's IPv6 program (see the log at start): %w", ErrUnsupported)

// put writes a consumer's delays to the map of its family (a zero
// setting deletes its entry). An IPv6 consumer where there are no IPv6
// maps has nothing to delete.
func (e *EDT) put(a netip.Addr, s Setting) error {
	var m *ebpf.Map
	var key any
	if k, ok := ipv4Key(a); ok {
		m, key = e.consumers, k
	} else if k, ok := ipv6Key(a); ok && e.consumers6 != nil {
		m, key = e.consumers6, k
	} else if s.IsZero() {
		return nil
	} else {
		return fmt.Errorf("no map for address %v", a)
	}
	if !s.IsZero() {
		return m.Put(key, [2]uint64{uint64(s.ReadDelay), uint64(s.WriteDelay)})
	}
	if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// List implements Throttle.
func (e *EDT) List() map[netip.Addr]Setting {
	return listed(&e.mu, e.cur, func(s Setting) Setting { return s })
}

// Close implements Throttle: the program first (no new stamps), then the
// fq root (the kernel reattaches its default, and sends what fq held),
// then the clsact if it added it and nobody else's filters hang there.
func (e *EDT) Close() error {
	e.guard.end()
	e.lease.end()
	err := errors.Join(CleanupEDT(e.cfg.Label), e.hook.release())
	e.close()
	return err
}

// close releases the program and maps.
func (e *EDT) close() {
	e.bpfObjects.close()
	for _, m := range []*ebpf.Map{e.last, e.consumers6, e.last6} {
		if m != nil {
			m.Close()
		}
	}
}

// CleanupEDT removes a label's program filter and fq root from every
// link, also after a crash.
func CleanupEDT(label string) error {
	if err := tcCheckLabel(label); err != nil {
		return err
	}
	major := tcRootMajor(label)
	errs := deleteFilters(netlink.HANDLE_MIN_EGRESS, func(a netlink.FilterAttrs) bool {
		return a.Priority == edtFilterPrio && a.Handle == uint32(major)
	})
	errs = append(errs, deleteOwnRoots(major, "fq")...)
	return errors.Join(errs...)
}

// EDTAvailable reports whether this kernel can run the EDT backend: an fq
// qdisc and a tc BPF program, probed on a veth in a scratch namespace.
// The reason says what is missing.
func EDTAvailable() (bool, string) {
	ok, why := false, ""
	err := inScratchNS(func(dev netlink.Link) error {
		e, err := NewEDT(EDTConfig{tcConfig: probeConfig(dev)})
		if err != nil {
			return err
		}
		ok, why = true, "fq qdisc and tc BPF programs work"
		return e.Close()
	})
	switch {
	case errors.Is(err, ErrNoFq):
		return false, ErrNoFq.Error()
	case err != nil:
		return false, "edt probe: " + err.Error()
	}
	return ok, why
}

// EDT keeps its consumers in BPF maps that nobody else can reach: what
// can go is fq and the filter with its clsact (guard.go).

// check finds our fq at the root and the program on the egress hook.
func (e *EDT) check(cc *checkConn) error {
	idx := e.dev.Attrs().Index
	h, kind, err := cc.rootQdisc(idx)
	if err != nil {
		return fmt.Errorf("root qdisc of %s: %w", e.cfg.Device, err)
	}
	if uint16(h>>16) != e.major || kind != "fq" {
		return broken("root qdisc of %s is %s %s, not sanqos' fq %x:", e.cfg.Device, kind, tcHandleString(h), e.major)
	}
	fs, err := cc.filters(idx, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return fmt.Errorf("egress filters of %s: %w", e.cfg.Device, err)
	}
	if !hasFilter(fs, edtFilterPrio, uint32(e.major)) {
		return broken("the program's filter is gone from %s's egress (clsact deleted?)", e.cfg.Device)
	}
	return nil
}

// repair puts fq back at the root (unless someone's qdisc is there) and
// the program back on the egress hook. The consumers' delays are in the
// map, which nobody else holds: they apply again as soon as both are
// back. Either alone delays nothing (fq without stamps sends at once;
// stamps without fq are ignored), so a failure leaves no half-delay.
func (e *EDT) repair() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	cc := &checkConn{}
	defer cc.close()
	idx := e.dev.Attrs().Index
	h, kind, err := cc.rootQdisc(idx)
	if err != nil {
		return err
	}
	if uint16(h>>16) != e.major || kind != "fq" {
		if err := e.fqRoot(); err != nil {
			return err
		}
	}
	fs, err := cc.filters(idx, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return err
	}
	if !hasFilter(fs, edtFilterPrio, uint32(e.major)) {
		return e.attach()
	}
	return nil
}
