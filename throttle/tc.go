package throttle

// Shared traffic-control plumbing of the netem and HTB backends: handle
// layout, marks and classes; the mark → class filters and the netlink
// messages that carry them are in tc_filter.go.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/bits"
	"regexp"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Handle layout. Every qdisc we create has a major number in 0x5100–0x52ff
// so that `tc qdisc show` and CleanupTC can tell ours from anyone else's.
// The root major also encodes the label, so a stale tree of one agent is
// never mistaken for another's.
const (
	tcRootMajorBase = 0x5100
	tcLeafMajorBase = 0x5200 // netem leaves: 0x5200 + step
	tcMaxSteps      = 0xff   // leaf majors must stay inside 0x52xx

	// tcFilterPrio is the priority of our classification filters; the
	// probe uses another one so a failed probe cannot disturb them.
	tcFilterPrio = 10
	tcProbePrio  = 11
)

// DefaultMarkMask is the part of the packet mark sanqos' tc backends own.
// Bits 16–27 leave the low word (kube-proxy's 0x4000/0x8000, Docker, most
// policy-routing setups) alone.
const DefaultMarkMask uint32 = 0x0fff0000

var tcLabelRE = regexp.MustCompile(`^[A-Za-z0-9_]+(-[A-Za-z0-9_]+)*$`)

// tcCheckLabel keeps every derived name inside the kernel's limits: ipset
// names are < 32 bytes (`<label>-rate`; `<label>-w-255` of older netem)
// and iptables chain names < 29 (`<label>-tc-data`).
func tcCheckLabel(label string) error {
	if len(label) == 0 || len(label) > 20 || !tcLabelRE.MatchString(label) {
		return fmt.Errorf("label %q: want 1–20 characters of [A-Za-z0-9_-]", label)
	}
	return nil
}

// tcConfig is what the kernel backends (netem, HTB, EDT, write caps)
// are configured by alike.
type tcConfig struct {
	// Device is the interface towards the consumers (required).
	Device string
	// Label names every object created (default "sanqos"); a start
	// removes what a crashed instance of the same label left.
	Label string
	// Ports are the target's TCP ports; only their traffic is throttled
	// (none: every TCP packet of a consumer).
	Ports []uint16
	// TTL is how long a throttle outlives this process, its lease's
	// deadline (DefaultMarkTTL).
	TTL time.Duration
	// Check is how often the backend's kernel objects are checked, and
	// put back with the current throttles if someone removed them
	// (guard.go): DefaultCheck if 0, never if negative.
	Check time.Duration
	// Log receives start-up messages; default slog.Default().
	Log *slog.Logger
}

// defaults fills in the label, TTL and logger, and checks the device
// and label; what names the backend in the error.
func (c *tcConfig) defaults(what string) error {
	c.Label = cmp.Or(c.Label, "sanqos")
	c.TTL = cmp.Or(c.TTL, DefaultMarkTTL)
	c.Log = cmp.Or(c.Log, slog.Default())
	if c.Device == "" {
		return errors.New(what + ": no device")
	}
	return tcCheckLabel(c.Label)
}

// tc is the kernel backends' tcConfig from the agent's options, their
// objects labelled with the agent's label and suffix.
func (o Options) tc(suffix string) (tcConfig, error) {
	dev, err := o.ConsumerDevice()
	return tcConfig{Device: dev, Label: o.Label + suffix, Ports: o.Ports, Check: o.Check, Log: o.Log}, err
}

// tcRootMajor is the root qdisc major of the instance with this label.
func tcRootMajor(label string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(label))
	return tcRootMajorBase | uint16(h.Sum32()&0xff)
}

// tcFilterKind is how the root qdisc maps a packet mark to a class.
type tcFilterKind string

const (
	// tcFw is cls_fw, the thesis' choice: one filter per mark.
	tcFw tcFilterKind = "fw"
	// tcU32Mark is cls_u32 with `match mark`, one filter per mark. Only
	// used when the kernel echoes the mark back: without
	// CONFIG_CLS_U32_MARK (as on this machine) the kernel accepts and
	// silently ignores TCA_U32_MARK, and the filter matches every packet.
	tcU32Mark tcFilterKind = "u32"
	// tcBPF is cls_bpf running an 8-instruction classic BPF program that
	// turns the mark into the class id: one filter for all marks.
	tcBPF tcFilterKind = "bpf"
)

// tcMarkMap ties the mark bits to class minors: minor = field + Offset
// where field = (mark & Mask) >> shift. Field 0 means "not ours" and goes
// to the default class.
type tcMarkMap struct {
	Major  uint16
	Mask   uint32
	Offset uint16
}

func (m tcMarkMap) shift() int { return bits.TrailingZeros32(m.Mask) }

// maxField is the largest field value the mask can carry.
func (m tcMarkMap) maxField() uint32 { return m.Mask >> m.shift() }

func (m tcMarkMap) mark(field uint32) uint32 { return field << m.shift() & m.Mask }

func (m tcMarkMap) classID(field uint32) uint32 {
	return netlink.MakeHandle(m.Major, uint16(field)+m.Offset)
}

// checkMarkMask refuses masks the filters cannot represent: holes would
// make the BPF shift wrong, and more than 16 bits cannot map onto a minor.
func checkMarkMask(mask uint32) error {
	if mask == 0 {
		return errors.New("mark mask is zero")
	}
	s := bits.TrailingZeros32(mask)
	w := bits.OnesCount32(mask)
	if mask>>s != 1<<w-1 {
		return fmt.Errorf("mark mask %#x is not one contiguous run of bits", mask)
	}
	if w > 16 {
		return fmt.Errorf("mark mask %#x is wider than 16 bits (a class minor)", mask)
	}
	return nil
}

// tcBPFInstructions is the program of the bpf filter: classid =
// major:(field+offset) for a marked packet and 0 ("no match": HTB then
// uses its default class) otherwise. A field without a class also ends
// in the default class, because HTB treats an unknown class id as
// "classification failed".
func tcBPFInstructions(m tcMarkMap) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtMark},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: m.Mask},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: uint32(m.shift())},
		bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: uint32(m.Offset)},
		bpf.ALUOpConstant{Op: bpf.ALUOpOr, Val: uint32(m.Major) << 16},
		bpf.RetA{},
		bpf.RetConstant{Val: 0},
	}
}

// tcBPFProgram is tcBPFInstructions assembled (struct sock_filter).
// Assembling fails only for an instruction that cannot be encoded, which
// none of these is for any map (TestNetemBPFClassifierMapsMarkToClass
// runs it), so a failure is a programming error.
func tcBPFProgram(m tcMarkMap) []bpf.RawInstruction {
	raw, err := bpf.Assemble(tcBPFInstructions(m))
	if err != nil {
		panic(fmt.Sprintf("tc bpf program for %+v: %v", m, err))
	}
	return raw
}

func serializeBPF(prog []bpf.RawInstruction) []byte {
	ne := nl.NativeEndian().(binary.AppendByteOrder)
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = ne.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = ne.AppendUint32(b, in.K)
	}
	return b
}

func tcHandleString(h uint32) string { return fmt.Sprintf("%x:%x", h>>16, h&0xffff) }

// tcHtbBuffer is the bucket depth in bytes: at least one 64 KiB GSO
// super-packet plus an MTU so a TSO burst never finds the bucket too
// small, 10 ms of rate above that, and never more than 100 s of rate
// (the tick count is 32 bits).
func tcHtbBuffer(rate uint64) uint32 {
	b := max(rate/100, 65536+1600)
	if lim := rate * 100; lim > 0 && b > lim {
		b = lim
	}
	return uint32(min(b, 1<<30))
}

// tcHtbQuantum keeps the DRR quantum inside what the kernel accepts without
// warning (≥ MTU, ≤ 200000).
func tcHtbQuantum(rate uint64) uint32 { return uint32(min(max(rate/10, 1600), 200000)) }

// tcHtbClass builds an HTB class. rate and ceil are in bytes/s (the
// library wants bits/s).
func tcHtbClass(ifindex int, id, parent uint32, rate, ceil uint64, prio uint32) *netlink.HtbClass {
	return netlink.NewHtbClass(
		netlink.ClassAttrs{LinkIndex: ifindex, Handle: id, Parent: parent},
		netlink.HtbClassAttrs{Rate: rate * 8, Ceil: ceil * 8, Prio: prio,
			Buffer: tcHtbBuffer(rate), Cbuffer: tcHtbBuffer(ceil), Quantum: tcHtbQuantum(rate)})
}

// tcRootQdisc is the HTB root of an instance; unclassified packets go to
// minor defcls.
func tcRootQdisc(ifindex int, major uint16, defcls uint32) *netlink.Htb {
	q := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(major, 0), Parent: netlink.HANDLE_ROOT})
	q.Defcls = defcls
	return q
}

// tcPrepareRoot makes sure the device's root qdisc is free for us: a stale
// tree of our own label is removed, anybody else's refuses the start.
func tcPrepareRoot(link netlink.Link, major uint16) error {
	qs, err := netlink.QdiscList(link)
	if err != nil {
		return fmt.Errorf("list qdiscs of %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qs {
		a := q.Attrs()
		if a.Parent != netlink.HANDLE_ROOT {
			continue
		}
		if uint16(a.Handle>>16) == major {
			if err := netlink.QdiscDel(q); err != nil {
				return fmt.Errorf("remove stale qdisc %s on %s: %w", tcHandleString(a.Handle), link.Attrs().Name, err)
			}
			continue
		}
		switch q.Type() {
		case "noqueue", "pfifo_fast", "mq", "fq_codel":
			// The kernel's defaults, nobody's configuration: ours
			// replaces them and deleting ours restores them.
			continue
		}
		return fmt.Errorf("%s already has a root qdisc %s (%s) that sanqos did not create; refusing to replace it", link.Attrs().Name, tcHandleString(a.Handle), q.Type())
	}
	return nil
}

// tcDeleteRoot removes our root qdisc and with it every class, leaf and
// filter below it.
func tcDeleteRoot(ifindex int, major uint16) error {
	err := netlink.QdiscDel(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(major, 0), Parent: netlink.HANDLE_ROOT}, QdiscType: "htb"})
	if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// deleteOwnRoots deletes, from every link, the root qdisc of kind with
// handle major: (a label's), whoever created it.
func deleteOwnRoots(major uint16, kind string) []error {
	links, err := netlink.LinkList()
	if err != nil {
		return []error{fmt.Errorf("list links: %w", err)}
	}
	var errs []error
	for _, l := range links {
		qs, err := netlink.QdiscList(l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, q := range qs {
			if q.Attrs().Parent != netlink.HANDLE_ROOT || uint16(q.Attrs().Handle>>16) != major || q.Type() != kind {
				continue
			}
			if err := netlink.QdiscDel(q); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("delete %s on %s: %w", kind, l.Attrs().Name, err))
			}
		}
	}
	return errs
}

// undoLog records how to reverse each kernel change of a multi-step
// update, so a failure part-way leaves the state as it was before.
type undoLog []func() error

func (u *undoLog) add(f func() error) { *u = append(*u, f) }

// rollback runs the recorded reversals newest first and returns err with
// any rollback failures joined to it.
func (u undoLog) rollback(err error) error {
	for i := len(u) - 1; i >= 0; i-- {
		if uerr := u[i](); uerr != nil {
			err = errors.Join(err, fmt.Errorf("rollback: %w", uerr))
		}
	}
	return err
}

// tcLeafBytes bounds a rate-capped consumer's queue. A class without a
// leaf qdisc gets pfifo with the device's txqueuelen (1000 packets), which
// two TCP senders on the target can overflow under a cap (TCP small queues
// let each keep ~1 MB queued): the drops are retransmissions caused by
// the throttle. 32 MiB covers 32 such senders per consumer; memory is only
// used while a consumer sends faster than its cap.
const tcLeafBytes = 32 << 20

// tcFifoLeafRequest builds RTM_NEWQDISC for a bfifo of limit bytes under
// class parent (vishvananda/netlink has no fifo type with options).
func tcFifoLeafRequest(ifindex int, parent, handle uint32, limit uint32) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Handle: handle, Parent: parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bfifo")))
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, nl.Uint32Attr(limit))) // struct tc_fifo_qopt
	return req
}

func tcAddFifoLeaf(ifindex int, parent, handle uint32, limit uint32) error {
	if _, err := tcFifoLeafRequest(ifindex, parent, handle, limit).Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("add bfifo leaf %s: %w", tcHandleString(handle), err)
	}
	return nil
}
