package throttle

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// WriteCap caps how fast consumers' writes reach the target: seed 001's
// per-consumer HTB classes, on the target's ingress, where a writer's data
// arrives. HTB shapes only what a device sends, so ingress traffic is
// steered into an IFB device whose root is the HTB tree; a capped
// writer's segments wait in its class and its TCP sees a slower path,
// nothing is dropped (each leaf's queue holds more than the writer's
// window, which the target's receive buffer bounds).
//
// The steering is two filters on the device's clsact ingress. A tc BPF
// program picks the packets: for a capped consumer's segment it names the
// class (skb->priority = major:minor, which HTB takes as the class when
// the major is its own, so the IFB needs no filters of its own) and hands
// the packet on to the next filter, a match-all u32 whose mirred action
// redirects it into the IFB; every other packet it passes at once. (The
// program's own bpf_redirect into an IFB works on 6.18 but is dropped by
// 6.1's IFB, which accepts only what mirred marks as redirected.) It does
// this only while a heartbeat the backend refreshes (TTL/3) lies in the
// future, for the reason the other tc backends classify by ipset entries
// with timeouts: fail-open. tc objects outlive the process; when the
// agent dies the heartbeat lapses within TTL and every packet takes the
// normal path, however many caps were set. Capping a consumer is a class
// change and one map update.
//
// IPv4 consumers only: the program reads fixed IPv4 offsets. Set caps the
// IPv4 writers of a batch and names the IPv6 ones it left uncapped in a
// RefusedError.
type WriteCap struct {
	cfg    WriteCapConfig
	major  uint16
	dev    netlink.Link
	ifb    netlink.Link
	hook   *clsactHook
	*guard // puts the IFB, its classes and the filters back when someone removes them (Reinstalls)

	bpfObjects // consumers: IPv4 (host order) → wcapValue
	// drained: IPv4 → the Last up to which its IFB path was found empty
	// (writecap_handover.go); user space writes it, the program reads it.
	drained *ebpf.Map
	drain   drainer
	forced  atomic.Uint64 // ForcedHandOvers

	mu       sync.Mutex
	cur      map[netip.Addr]htbConsumer
	minor    map[uint16]bool
	draining map[netip.Addr]drainingCap // lifted caps being handed over
}

// WriteCapConfig configures WriteCap.
type WriteCapConfig struct {
	tcConfig
	// LinkRate (bytes/s) is the IFB root's rate; default the device's
	// speed, else MaxRate.
	LinkRate uint64
}

// writeCapMaxConsumers bounds the capped consumers (class minors and
// map entries); the lever caps a resource's heaviest writers, a handful.
const writeCapMaxConsumers = 4096

// writeCapPrios are our two filters' priorities on the clsact ingress
// hook, derived from the label's major so that several labels never
// collide: the program first, the redirect after it.
func writeCapPrios(major uint16) (program, redirect uint16) { return major, major + 0x100 }

// writeCapQueue is each leaf's queue in packets. A writer can have at
// most its TCP window in flight, which the target's receive buffer
// bounds (tcp_rmem max: 6 MiB by default, 4,300 full segments); 10,000
// holds that with room, so the shaper delays and never drops.
const writeCapQueue = 10000

// WriteCapIFB is the IFB device of a label.
func WriteCapIFB(label string) string { return fmt.Sprintf("sqw%04x", tcRootMajor(label)) }

// NewWriteCap builds the IFB tree and attaches the steering program; on
// error nothing remains.
func NewWriteCap(cfg WriteCapConfig) (*WriteCap, error) {
	if err := cfg.defaults("write cap"); err != nil {
		return nil, err
	}
	if cfg.LinkRate == 0 {
		cfg.LinkRate = linkSpeed(cfg.Device)
	}
	if cfg.LinkRate > MaxRate {
		return nil, fmt.Errorf("write cap: link rate %d B/s above %d", cfg.LinkRate, uint64(MaxRate))
	}
	dev, err := netlink.LinkByName(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("write cap: device %s: %w", cfg.Device, err)
	}
	if err := CleanupWriteCap(cfg.Label); err != nil {
		return nil, fmt.Errorf("write cap: remove stale objects of label %s: %w", cfg.Label, err)
	}
	w := &WriteCap{cfg: cfg, major: tcRootMajor(cfg.Label), dev: dev, cur: map[netip.Addr]htbConsumer{}, minor: map[uint16]bool{},
		draining: map[netip.Addr]drainingCap{},
		hook:     &clsactHook{ifindex: dev.Attrs().Index, dev: cfg.Device}}
	if err := w.build(); err != nil {
		w.close()
		if cerr := errors.Join(CleanupWriteCap(cfg.Label), w.hook.release()); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup after failed start: %w", cerr))
		}
		return nil, fmt.Errorf("write cap on %s: %w", cfg.Device, err)
	}
	w.lease.start()
	w.startDrainer()
	w.guard = startGuard(&guard{what: "write caps", interval: cfg.Check, log: cfg.Log, check: w.check, repair: w.repair})
	cfg.Log.Info("write-rate caps ready", "device", cfg.Device, "ifb", WriteCapIFB(cfg.Label), "ttl", cfg.TTL)
	return w, nil
}

func (w *WriteCap) build() error {
	if err := w.buildIFB(); err != nil {
		return err
	}
	if err := w.load(); err != nil {
		return err
	}
	return w.steer()
}

// buildIFB adds the IFB and its HTB tree (without consumer classes).
func (w *WriteCap) buildIFB() error {
	la := netlink.NewLinkAttrs()
	la.Name = WriteCapIFB(w.cfg.Label)
	la.TxQLen = writeCapQueue
	la.NumTxQueues = 1 // one first-in first-out queue, which the hand-over's count relies on
	if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: la}); err != nil {
		return fmt.Errorf("add ifb %s: %w", la.Name, err)
	}
	ifb, err := netlink.LinkByName(la.Name)
	if err != nil {
		return err
	}
	w.ifb = ifb
	if err := netlink.LinkSetUp(ifb); err != nil {
		return fmt.Errorf("ifb up: %w", err)
	}
	// The HTB backend's fixed tree (root class at the link rate, a
	// default class), under this label's major.
	p := (&HTBConfig{tcConfig: tcConfig{Label: w.cfg.Label}, LinkRate: w.cfg.LinkRate}).plan(ifb.Attrs().Index)
	if err := netlink.QdiscAdd(p.Root); err != nil {
		return fmt.Errorf("add htb on ifb: %w", err)
	}
	for _, c := range p.Classes {
		if err := netlink.ClassAdd(c); err != nil {
			return fmt.Errorf("add htb class on ifb: %w", err)
		}
	}
	return nil
}

// load makes the map, the heartbeat and the steering program.
func (w *WriteCap) load() error {
	raiseMemlock(w.cfg.Log)
	var err error
	if w.consumers, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: wcapValueSize, MaxEntries: writeCapMaxConsumers}); err != nil {
		return fmt.Errorf("bpf map: %w", err)
	}
	if w.drained, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: writeCapMaxConsumers}); err != nil {
		return fmt.Errorf("bpf map: %w", err)
	}
	if w.lease, err = newBPFLease(w.cfg.TTL, w.cfg.Log, "write caps"); err != nil {
		return err
	}
	w.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sanqos_wcap", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: writeCapProgram(w.cfg.Ports, w.consumers.FD(), w.drained.FD(), w.lease.m.FD())})
	if err != nil {
		return fmt.Errorf("load steering program: %w", err)
	}
	return nil
}

// steer attaches the two filters to the device's clsact ingress hook
// (adding the clsact if the device has none): the redirect into the IFB
// first, so the program never hands a packet on to nothing.
func (w *WriteCap) steer() error {
	if err := w.hook.ensure(); err != nil {
		return err
	}
	progPrio, redirPrio := writeCapPrios(w.major)
	idx := w.dev.Attrs().Index
	redirect := &netlink.U32{FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Priority: redirPrio, Protocol: unix.ETH_P_ALL},
		Sel:     &netlink.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Nkeys: 1, Keys: []netlink.TcU32Key{{}}}, // matches every packet it sees
		Actions: []netlink.Action{netlink.NewMirredAction(w.ifb.Attrs().Index)}}
	if err := netlink.FilterAdd(redirect); err != nil {
		return fmt.Errorf("add redirect filter: %w", err)
	}
	prog := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS,
		Handle: 1, Protocol: unix.ETH_P_ALL, Priority: progPrio}, Fd: w.prog.FD(), Name: "sanqos_wcap", DirectAction: true}
	if err := netlink.FilterAdd(prog); err != nil {
		return fmt.Errorf("attach steering program: %w", err)
	}
	return nil
}

// tcActUnspec is TC_ACT_UNSPEC: in direct-action mode, "go on to the next
// filter", here the redirect into the IFB.
const tcActUnspec = -1

// writeCapProgram tags TCP segments to any of ports (none: any port) from a consumer in
// the consumers map with the consumer's class and hands them to the next filter
// (TC_ACT_UNSPEC), while the heartbeat lasts; everything else passes
// (TC_ACT_OK). LD_ABS/LD_IND read the packet in host byte order and end
// the program (returning 0, pass) on a short packet.
//
// Pure ACKs pass too: they carry no writes, and queued behind a capped
// writer's data they would acknowledge the target's replies late, so the
// target would send spurious tail-loss probes (lab, twelve writers at
// 10 ms: 42 probes and 6 RTOs on the target's side in one run, none
// after). Overtaking the writer's queued data is harmless: the target
// takes an in-window segment without data for its acknowledgement and
// does not answer it. A FIN stays in order.
func writeCapProgram(ports []uint16, consumers, drained, beat int) asm.Instructions {
	const priorityOff = 32 // offsetof(struct __sk_buff, priority)
	const fin = 0x01
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadAbs(12, asm.Half), // ethertype
		asm.JNE.Imm(asm.R0, unix.ETH_P_IP, "pass"),
		asm.LoadAbs(14+9, asm.Byte), // IP protocol
		asm.JNE.Imm(asm.R0, unix.IPPROTO_TCP, "pass"),
		asm.LoadAbs(14, asm.Byte),
		asm.And.Imm(asm.R0, 0x0f),
		asm.LSh.Imm(asm.R0, 2), // IP header length
		asm.Mov.Reg(asm.R7, asm.R0),
	}
	if len(ports) > 0 {
		insns = append(insns, asm.LoadInd(asm.R0, asm.R7, 14+2, asm.Half)) // TCP destination port
		insns = append(insns, portJumps(ports, "port")...)
	}
	insns = append(insns,
		asm.LoadInd(asm.R0, asm.R7, 14+13, asm.Byte).WithSymbol("port"), // TCP flags
		asm.And.Imm(asm.R0, fin),
		asm.JNE.Imm(asm.R0, 0, "steer"),
		asm.LoadInd(asm.R0, asm.R7, 14+12, asm.Byte), // TCP data offset
		asm.RSh.Imm(asm.R0, 4),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.LoadAbs(14+2, asm.Half), // IP total length
		asm.Sub.Reg(asm.R0, asm.R7),
		asm.Sub.Reg(asm.R0, asm.R8),
		asm.JEq.Imm(asm.R0, 0, "pass"),                   // no payload: a pure ACK
		asm.LoadAbs(14+12, asm.Word).WithSymbol("steer"), // source address
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
	)
	insns = append(insns, leaseAndLookup(beat, consumers)...)
	insns = append(insns,
		// A consumer being handed over (writecap_handover.go) stays
		// in its class, its entry stamped with each segment's time,
		// until user space has found its path empty up to the last
		// stamp and said so in the drained map.
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.LoadMem(asm.R1, asm.R9, 4, asm.Word), // handOver
		asm.JEq.Imm(asm.R1, 0, "tag"),
	)
	insns = append(insns, lookupAt(drained, -4, "hold")...)
	return append(insns,
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), // drained up to
		asm.LoadMem(asm.R2, asm.R9, 8, asm.DWord), // last steered
		asm.JEq.Reg(asm.R1, asm.R2, "pass"),
		asm.FnKtimeGetNs.Call().WithSymbol("hold"),
		asm.StoreMem(asm.R9, 8, asm.R0, asm.DWord),
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Word).WithSymbol("tag"), // the class
		asm.StoreMem(asm.R6, priorityOff, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R0, tcActUnspec),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"),
		asm.Return(),
	)
}

// Name implements Throttle: an HTB backend, on the ingress; layered under
// the delay line it makes the config's delayline+htb.
func (w *WriteCap) Name() string { return "htb" }

// Set implements Throttle: only WriteRate; other fields are not this
// backend's (Layered sends them elsewhere).
func (w *WriteCap) Set(settings map[netip.Addr]Setting) error {
	if err := validateFor("write caps", Caps{WriteRate: true}, settings); err != nil {
		return err
	}
	// An IPv6 writer is left uncapped and named in the error; the others'
	// caps go ahead.
	settings, refused := only4("write caps", settings, func(s Setting) bool { return s.WriteRate != 0 }, errIPv6)
	w.mu.Lock()
	defer w.mu.Unlock()
	next, used, err := w.plan(settings)
	if err != nil {
		return err
	}
	var lifted []netip.Addr
	for a := range w.cur {
		if _, ok := next[a]; !ok {
			lifted = append(lifted, a)
		}
	}
	for a := range next {
		delete(w.draining, a) // capped again: its map entry says so now
	}
	w.handOver(lifted)
	w.cur, w.minor = next, used
	if err := w.lease.refresh(); err != nil {
		return err
	}
	return refused.err()
}

// plan makes the classes of settings' caps and steers the capped
// consumers to them, and returns the caps and class minors that result;
// on error it undoes its class changes. A consumer capped again while
// its last cap is being handed over gets its class back (so its queued
// segments stay ahead of the new ones).
func (w *WriteCap) plan(settings map[netip.Addr]Setting) (map[netip.Addr]htbConsumer, map[uint16]bool, error) {
	next := maps.Clone(w.cur)
	used := maps.Clone(w.minor)
	var added []uint16
	var recapped []netip.Addr
	rollback := func() {
		for _, m := range added {
			_ = netlink.ClassDel(netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: w.ifb.Attrs().Index, Handle: netlink.MakeHandle(w.major, m)}, netlink.HtbClassAttrs{}))
		}
		for _, a := range recapped {
			_ = netlink.ClassChange(w.openClass(w.draining[a].minor))
		}
	}
	for a, s := range settings {
		a = a.Unmap()
		old, had := next[a]
		if s.WriteRate == 0 {
			delete(next, a)
			continue
		}
		c := htbConsumer{minor: old.minor, rate: s.WriteRate}
		if d, ok := w.draining[a]; !had && ok {
			c.minor = d.minor
			recapped = append(recapped, a)
		} else if !had {
			m, ok := freeMinor(used)
			if !ok {
				rollback()
				return nil, nil, fmt.Errorf("write cap: more than %d capped consumers", writeCapMaxConsumers)
			}
			c.minor, used[m] = m, true
			added = append(added, m)
		}
		if had && old.rate == c.rate {
			continue
		}
		if err := netlink.ClassReplace(w.class(c)); err != nil {
			rollback()
			return nil, nil, fmt.Errorf("write cap class for %v: %w", a, err)
		}
		next[a] = c
	}
	// The map last: a packet is steered only to a class that exists.
	for a, c := range next {
		key, _ := ipv4Key(a) // every capped consumer is IPv4 (Set refuses the rest)
		if err := w.consumers.Put(key, wcapValue{Class: uint32(netlink.MakeHandle(w.major, c.minor))}); err != nil {
			rollback()
			return nil, nil, fmt.Errorf("write cap map: %w", err)
		}
	}
	return next, used, nil
}

// close releases the BPF objects (the program stays attached until its
// filter goes).
func (w *WriteCap) close() {
	if w.drained != nil {
		w.drained.Close()
	}
	w.bpfObjects.close()
}

func (w *WriteCap) class(c htbConsumer) *netlink.HtbClass {
	return tcHtbClass(w.ifb.Attrs().Index, netlink.MakeHandle(w.major, c.minor), netlink.MakeHandle(w.major, htbRootMinor), c.rate, c.rate, 1)
}

func freeMinor(used map[uint16]bool) (uint16, bool) {
	for m := uint16(htbFirstConsumer); m < htbFirstConsumer+writeCapMaxConsumers; m++ {
		if !used[m] {
			return m, true
		}
	}
	return 0, false
}

// List implements Throttle.
func (w *WriteCap) List() map[netip.Addr]Setting {
	return listed(&w.mu, w.cur, func(c htbConsumer) Setting { return Setting{WriteRate: c.rate} })
}

// Close implements Throttle: the filter first (traffic takes the normal
// path at once), then the IFB with its tree, the clsact if it added it
// and nobody else's filters hang there, then the program and maps.
func (w *WriteCap) Close() error {
	w.guard.end()
	w.drain.end()
	w.lease.end()
	err := errors.Join(CleanupWriteCap(w.cfg.Label), w.hook.release())
	w.close()
	return err
}

// CleanupWriteCap removes a label's steering filters (from every link's
// ingress) and its IFB, also after a crash.
func CleanupWriteCap(label string) error {
	if err := tcCheckLabel(label); err != nil {
		return err
	}
	errs := unsteerWriteCap(label)
	if l, err := netlink.LinkByName(WriteCapIFB(label)); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", l.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}

// unsteerWriteCap removes a label's steering filters from every link's
// ingress hook.
func unsteerWriteCap(label string) []error {
	progPrio, redirPrio := writeCapPrios(tcRootMajor(label))
	return deleteFilters(netlink.HANDLE_MIN_INGRESS, func(a netlink.FilterAttrs) bool {
		return a.Priority == progPrio || a.Priority == redirPrio
	})
}
