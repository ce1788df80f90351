package throttle

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

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
// It needs sch_fq (CONFIG_NET_SCH_FQ) and BPF; EDTAvailable says whether
// this kernel has both. IPv4 consumers only.
type EDT struct {
	cfg   EDTConfig
	major uint16
	dev   netlink.Link
	hook  *clsactHook
	guard *guard // puts fq and the filter back when someone removes them

	bpfObjects           // consumers: IPv4 (host order) → {read ns, write ns}
	last       *ebpf.Map // IPv4 (host order) → latest departure (ns, CLOCK_MONOTONIC)

	mu  sync.Mutex
	cur map[netip.Addr]Setting
}

// EDTConfig configures EDT.
type EDTConfig struct {
	Device  string // the target's interface towards the consumers (required)
	Label   string // default "sanqos"
	Port    uint16 // the target's TCP port (source port of delayed segments); 0: any
	WriteOn WriteOn
	TTL     time.Duration // heartbeat: default DefaultMarkTTL
	// Check is how often fq and the filter are checked, and put back if
	// someone removed them (guard.go): DefaultCheck if 0, never if
	// negative.
	Check time.Duration
	Log   *slog.Logger
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
	if cfg.Label == "" {
		cfg.Label = "sanqos"
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultMarkTTL
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := tcCheckLabel(cfg.Label); err != nil {
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
	cfg.Log.Info("edt throttle ready", "device", cfg.Device, "root", tcHandleString(netlink.MakeHandle(e.major, 0)), "write_delay_on", cfg.WriteOn)
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
	if e.consumers, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: 65536}); err != nil {
		return fmt.Errorf("bpf map: %w", err)
	}
	if e.last, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 65536}); err != nil {
		return fmt.Errorf("bpf map: %w", err)
	}
	if e.lease, err = newBPFLease(e.cfg.TTL, e.cfg.Log, "edt delays"); err != nil {
		return err
	}
	e.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sanqos_edt", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: edtProgram(e.cfg.Port, e.cfg.WriteOn, e.consumers.FD(), e.last.FD(), e.lease.m.FD())})
	if err != nil {
		return fmt.Errorf("load program: %w", err)
	}
	return e.attach()
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

// skbTstampOff is offsetof(struct __sk_buff, tstamp).
const skbTstampOff = 152

// edtProgram stamps TCP segments from port (0: any) to a consumer in the
// delays map with now + its delay, never earlier than a stamp they carry,
// while the heartbeat lasts. A segment with payload is also never stamped
// earlier than the consumer's last departure (the last map, which the
// program keeps), whether or not the consumer still has a delay. It
// always returns TC_ACT_OK: it delays, it never drops or redirects. It
// is one function because it is one BPF program, read top to bottom as
// the verifier reads it: its jumps go to labels inside it.
func edtProgram(port uint16, writeOn WriteOn, delays, last, beat int) asm.Instructions {
	// Registers past the parse: R6 the context, R7 now, R8 the delay and
	// then the departure, R9 the payload length (≤ 0: a pure ACK).
	// Stack: -4 the consumer key, -8 the lease key, -16 a new departure.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadAbs(12, asm.Half),
		asm.JNE.Imm(asm.R0, unix.ETH_P_IP, "pass"),
		asm.LoadAbs(14+9, asm.Byte),
		asm.JNE.Imm(asm.R0, unix.IPPROTO_TCP, "pass"),
		asm.LoadAbs(14, asm.Byte),
		asm.And.Imm(asm.R0, 0x0f),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R7, asm.R0), // IP header length
	}
	if port != 0 {
		insns = append(insns,
			asm.LoadInd(asm.R0, asm.R7, 14, asm.Half), // TCP source port
			asm.JNE.Imm(asm.R0, int32(port), "pass"),
		)
	}
	insns = append(insns,
		// Payload length = IP total length − IP header − TCP header.
		asm.LoadInd(asm.R0, asm.R7, 14+12, asm.Byte),
		asm.RSh.Imm(asm.R0, 4),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.Add.Reg(asm.R8, asm.R7),
		asm.LoadAbs(14+2, asm.Half),
		asm.Sub.Reg(asm.R0, asm.R8),
		asm.Mov.Reg(asm.R9, asm.R0),  // payload bytes (≤ 0: a pure ACK)
		asm.LoadAbs(14+16, asm.Word), // destination: the consumer
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
	)
	insns = append(insns, leaseCheck(beat)...)
	insns = append(insns, asm.Mov.Imm(asm.R8, 0))
	insns = append(insns, lookupConsumer(delays, "delayed")...)
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), // read delay
		asm.LoadMem(asm.R2, asm.R0, 8, asm.DWord), // write delay
		asm.JSLE.Imm(asm.R9, 0, "ack"),
		asm.Mov.Reg(asm.R8, asm.R1),
	)
	if writeOn == WriteOnReplies {
		insns = append(insns,
			asm.JGE.Reg(asm.R8, asm.R2, "delayed"),
			asm.Mov.Reg(asm.R8, asm.R2),
		)
	}
	insns = append(insns, asm.Ja.Label("delayed"))
	if writeOn == WriteOnACKs {
		insns = append(insns, asm.Mov.Reg(asm.R8, asm.R2).WithSymbol("ack"))
	} else {
		insns = append(insns, asm.Mov.Imm(asm.R8, 0).WithSymbol("ack"))
	}
	return append(insns,
		// R8 is the delay (0 for a consumer without one).
		asm.FnKtimeGetNs.Call().WithSymbol("delayed"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.JSGT.Imm(asm.R9, 0, "payload"),
		// A pure ACK: now + delay, if any.
		asm.JEq.Imm(asm.R8, 0, "pass"),
		asm.Add.Reg(asm.R8, asm.R7),
		asm.LoadMem(asm.R1, asm.R6, skbTstampOff, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R8, "pass"), // the sender's own stamp is later
		asm.StoreMem(asm.R6, skbTstampOff, asm.R8, asm.DWord),
		asm.Ja.Label("pass"),
		// A segment with payload: now + delay, no earlier than the
		// consumer's last departure nor than the sender's own stamp.
		asm.Add.Reg(asm.R8, asm.R7).WithSymbol("payload"),
		asm.LoadMapPtr(asm.R1, last),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "due"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JGE.Reg(asm.R8, asm.R1, "due"),
		asm.Mov.Reg(asm.R8, asm.R1),
		asm.JGT.Reg(asm.R8, asm.R7, "hold").WithSymbol("due"),
		asm.Ja.Label("pass"), // nothing of the consumer's is held, and no delay
		asm.LoadMem(asm.R1, asm.R6, skbTstampOff, asm.DWord).WithSymbol("hold"),
		asm.JGE.Reg(asm.R8, asm.R1, "stamp"),
		asm.Mov.Reg(asm.R8, asm.R1), // the sender's own stamp is later
		asm.StoreMem(asm.R6, skbTstampOff, asm.R8, asm.DWord).WithSymbol("stamp"),
		asm.StoreMem(asm.RFP, -16, asm.R8, asm.DWord),
		asm.LoadMapPtr(asm.R1, last),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"),
		asm.Return(),
	)
}

// Name implements Throttle.
func (e *EDT) Name() string { return "edt" }

// Set implements Throttle.
func (e *EDT) Set(settings map[netip.Addr]Setting) error {
	if err := ValidateAll(settings); err != nil {
		return err
	}
	for a, s := range settings {
		if s.Rate != 0 || s.WriteRate != 0 {
			return fmt.Errorf("edt: consumer %v: rate cap: %w", a, ErrUnsupported)
		}
		if !s.IsZero() && !a.Unmap().Is4() {
			return fmt.Errorf("edt: consumer %v: IPv6: %w", a, ErrUnsupported)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var done []netip.Addr
	for a, s := range settings {
		a = a.Unmap()
		var err error
		if s.IsZero() {
			if err = e.consumers.Delete(ipv4Key(a)); errors.Is(err, ebpf.ErrKeyNotExist) {
				err = nil
			}
		} else {
			err = e.consumers.Put(ipv4Key(a), [2]uint64{uint64(s.ReadDelay), uint64(s.WriteDelay)})
		}
		if err != nil {
			// Put back what was applied: all or nothing.
			for _, b := range done {
				if old, ok := e.cur[b]; ok {
					_ = e.consumers.Put(ipv4Key(b), [2]uint64{uint64(old.ReadDelay), uint64(old.WriteDelay)})
				} else {
					_ = e.consumers.Delete(ipv4Key(b))
				}
			}
			return fmt.Errorf("edt: consumer %v: %w", a, err)
		}
		done = append(done, a)
	}
	for a, s := range settings {
		if s.IsZero() {
			delete(e.cur, a.Unmap())
		} else {
			e.cur[a.Unmap()] = s
		}
	}
	return e.lease.refresh()
}

// Clear implements Throttle.
func (e *EDT) Clear(consumers ...netip.Addr) error { return clearVia(e.List, e.Set, consumers) }

// List implements Throttle.
func (e *EDT) List() map[netip.Addr]Setting {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[netip.Addr]Setting, len(e.cur))
	for a, s := range e.cur {
		out[a] = s
	}
	return out
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

// Reinstalls implements Reinstaller.
func (e *EDT) Reinstalls() uint64 { return e.guard.Reinstalls() }

// close releases the program and maps.
func (e *EDT) close() {
	e.bpfObjects.close()
	if e.last != nil {
		e.last.Close()
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
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		qs, err := netlink.QdiscList(l)
		if err != nil {
			continue
		}
		for _, q := range qs {
			if q.Attrs().Parent == netlink.HANDLE_ROOT && uint16(q.Attrs().Handle>>16) == major && q.Type() == "fq" {
				if err := netlink.QdiscDel(q); err != nil {
					errs = append(errs, fmt.Errorf("delete fq on %s: %w", l.Attrs().Name, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// EDTAvailable reports whether this kernel can run the EDT backend: an fq
// qdisc and a tc BPF program, probed on a veth in a scratch namespace.
// The reason says what is missing.
func EDTAvailable() (bool, string) {
	ok, why := false, ""
	err := inScratchNS(func(dev netlink.Link) error {
		e, err := NewEDT(EDTConfig{Device: dev.Attrs().Name, Label: "probe", Check: -1, Log: slog.New(slog.DiscardHandler)})
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
