package throttle

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// What the two tc BPF backends (EDT, write caps) share: the heartbeat
// that makes them fail open, the program fragment that checks it and
// finds the consumer, and their bookkeeping.

// raiseMemlock lifts RLIMIT_MEMLOCK before a backend makes its BPF maps.
// Kernels before 5.11 charge BPF maps and programs to the locked-memory
// limit (later ones to the memory cgroup), and edt's 65536-entry
// maps alone exceed the 8 MiB many distributions default to: the map
// creation then fails with a bare EPERM. On 5.11 and later it does
// nothing. The systemd unit sets LimitMEMLOCK=infinity too; this covers
// the agent run from a shell or a container.
//
// Not cilium/ebpf's rlimit.RemoveMemlock, which does the same: that
// package finds out whether the kernel charges the limit by creating a
// BPF map in its init, in every process that links it — `sanqos doctor`
// too, which must create no BPF object (doctor's TestNoStateSyscalls).
func raiseMemlock(log *slog.Logger) {
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		raiseMemlockFor(unix.ByteSliceToString(u.Release[:]), log)
	}
}

// raiseMemlockFor does raiseMemlock's work for a kernel release. Raising
// the hard limit needs CAP_SYS_RESOURCE; without it the soft limit goes
// up to the hard one, the maps may still fit, and the warning explains
// an EPERM that may follow.
func raiseMemlockFor(release string, log *slog.Logger) {
	if !memlockCharged(release) {
		return
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return
	}
	err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
	if err == nil {
		return
	}
	if lim.Max > lim.Cur {
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: lim.Max, Max: lim.Max})
	}
	log = cmp.Or(log, slog.Default())
	log.Warn("cannot lift RLIMIT_MEMLOCK; on kernels before 5.11 the BPF maps must fit under it (LimitMEMLOCK=infinity, or CAP_SYS_RESOURCE)",
		"kernel", release, "hard_limit_bytes", lim.Max, "err", err)
}

// memlockCharged reports whether a kernel release charges BPF memory to
// RLIMIT_MEMLOCK: those before 5.11. A release it cannot read counts as
// charging: raising the limit where it is not needed costs nothing.
func memlockCharged(release string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		return true
	}
	return major < 5 || major == 5 && minor < 11
}

// bpfObjects are a BPF backend's kernel-side objects: its program, the
// map of its consumers and its lease.
type bpfObjects struct {
	prog      *ebpf.Program
	consumers *ebpf.Map
	lease     *bpfLease
}

// close releases them (the program stays attached until its filter goes).
func (o *bpfObjects) close() {
	if o.prog != nil {
		o.prog.Close()
	}
	if o.consumers != nil {
		o.consumers.Close()
	}
	o.lease.close()
}

// bpfLease is a BPF backend's heartbeat: a deadline (CLOCK_MONOTONIC ns,
// as bpf_ktime_get_ns) in a one-entry array map that the program checks
// before acting on any packet, moved to now + TTL by a lease. When the
// agent dies nobody moves it, and within TTL the program lets everything
// pass as if it were not there: tc filters outlive their process, this
// does not.
type bpfLease struct {
	m    *ebpf.Map
	ttl  time.Duration
	log  *slog.Logger
	what string // "edt delays", "write caps": for the log
	hb   *lease
}

func newBPFLease(ttl time.Duration, log *slog.Logger, what string) (*bpfLease, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("bpf map: %w", err)
	}
	l := &bpfLease{m: m, ttl: ttl, log: log, what: what}
	if err := l.refresh(); err != nil {
		m.Close()
		return nil, err
	}
	return l, nil
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// refresh moves the deadline to now + TTL.
func (l *bpfLease) refresh() error {
	if err := l.m.Put(uint32(0), monoNow()+uint64(l.ttl)); err != nil {
		return fmt.Errorf("%s heartbeat: %w", l.what, err)
	}
	return nil
}

// start refreshes every TTL/3 until end.
func (l *bpfLease) start() {
	l.hb = startLease(l.ttl, func() {
		if err := l.refresh(); err != nil {
			l.log.Error(l.what+" will lapse", "err", err)
		}
	})
}

// end stops refreshing (the deadline then lapses within TTL).
func (l *bpfLease) end() {
	if l != nil {
		l.hb.end()
	}
}

func (l *bpfLease) close() {
	if l != nil {
		l.end()
		l.m.Close()
	}
}

// leaseAndLookup is the program fragment both backends run once they have
// stored the consumer's key (IPv4, host order) at RFP−4: it jumps to
// "pass" if the lease has lapsed or the consumer is not in consumers, and
// otherwise leaves a pointer to its value in R0. It clobbers R1–R5 and R7.
func leaseAndLookup(lease, consumers int) asm.Instructions {
	return append(leaseCheck(lease), lookupConsumer(consumers, "pass")...)
}

// leaseCheck jumps to "pass" unless the heartbeat in the lease map lies
// in the future. It uses the stack at -8 and clobbers R0–R5 and R7.
func leaseCheck(lease int) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, -8, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, lease),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R7, asm.R0, 0, asm.DWord), // the deadline
		asm.FnKtimeGetNs.Call(),
		asm.JGT.Reg(asm.R0, asm.R7, "pass"), // lapsed: fail open
	}
}

// lookupConsumer leaves in R0 the value of the key at stack -4 in the
// consumers map, or jumps to missing.
func lookupConsumer(consumers int, missing string) asm.Instructions {
	return lookupAt(consumers, -4, missing)
}

// lookupAt leaves in R0 the value in map m of the key at stack offset
// key, or jumps to missing.
func lookupAt(m int, key int16, missing string) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, missing),
	}
}

// ipv4Key is an IPv4 consumer's key in the BPF maps: its address as a
// host-order number, as the programs' LD_ABS loads it from the packet.
// Any other address (IPv6, invalid) has none: ok is false.
func ipv4Key(a netip.Addr) (key uint32, ok bool) {
	if a = a.Unmap(); !a.Is4() {
		return 0, false
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), true
}

// ipv6Key is an IPv6 consumer's key in edt's IPv6 maps: its 16 bytes in
// network order, as bpf_skb_load_bytes copies them from the packet. An
// IPv4 (or IPv4-mapped) address, or an invalid one, has none.
func ipv6Key(a netip.Addr) (key [16]byte, ok bool) {
	if a = a.Unmap(); !a.Is6() {
		return key, false
	}
	return a.As16(), true
}

// deleteFilters removes, from every link's clsact hook parent, the
// filters mine picks; links without the hook are skipped.
func deleteFilters(parent uint32, mine func(netlink.FilterAttrs) bool) []error {
	links, err := netlink.LinkList()
	if err != nil {
		return []error{fmt.Errorf("list links: %w", err)}
	}
	var errs []error
	for _, l := range links {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			continue
		}
		for _, f := range fs {
			if mine(*f.Attrs()) {
				if err := netlink.FilterDel(f); err != nil {
					errs = append(errs, fmt.Errorf("delete filter on %s: %w", l.Attrs().Name, err))
				}
			}
		}
	}
	return errs
}
