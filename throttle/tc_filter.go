package throttle

// The mark → class filters of the netem and HTB backends. They are built
// as raw rtnetlink messages (with vishvananda/netlink's nl package)
// because the library's U32 type has no mark field and its BpfFilter only
// takes eBPF file descriptors; building them here also lets the unit
// tests compare the exact bytes sent to the kernel.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// tcFilterSpec is one filter as we send it; tests compare these and their
// serialisation.
type tcFilterSpec struct {
	Kind     tcFilterKind
	Ifindex  int
	Parent   uint32
	Prio     uint16
	Protocol uint16 // host order ETH_P_*
	Handle   uint32
	ClassID  uint32 // fw, u32
	Mark     uint32 // fw (in Handle), u32
	Mask     uint32
	BPF      []bpf.RawInstruction
}

// tcFilterSpecs lists the filters that map every field in fields to its
// class. For bpf, one filter covers them all.
func tcFilterSpecs(kind tcFilterKind, ifindex int, m tcMarkMap, fields []uint32, prio uint16) []tcFilterSpec {
	parent := netlink.MakeHandle(m.Major, 0)
	if kind == tcBPF {
		return []tcFilterSpec{{Kind: tcBPF, Ifindex: ifindex, Parent: parent, Prio: prio,
			Protocol: unix.ETH_P_ALL, Handle: 1, Mask: m.Mask, BPF: tcBPFProgram(m)}}
	}
	var out []tcFilterSpec
	for _, f := range fields {
		out = append(out, tcFilterFor(kind, ifindex, m, f, prio))
	}
	return out
}

// tcFilterFor is the fw or u32 filter of one mark field.
func tcFilterFor(kind tcFilterKind, ifindex int, m tcMarkMap, field uint32, prio uint16) tcFilterSpec {
	s := tcFilterSpec{Kind: kind, Ifindex: ifindex, Parent: netlink.MakeHandle(m.Major, 0), Prio: prio,
		ClassID: m.classID(field), Mark: m.mark(field), Mask: m.Mask}
	switch kind {
	case tcFw:
		// cls_fw's handle is the mark it matches (after the mask).
		s.Protocol, s.Handle = unix.ETH_P_ALL, s.Mark
	case tcU32Mark:
		// 800::<field>: explicit node ids so one filter can be deleted
		// without listing; u32 node ids are 12 bits.
		s.Protocol, s.Handle = unix.ETH_P_IP, 0x80000000|field&0xfff
	}
	return s
}

// request builds the RTM_NEWTFILTER (or DEL) message for s.
func (s tcFilterSpec) request(cmd int, flags int) (*nl.NetlinkRequest, error) {
	req := nl.NewNetlinkRequest(cmd, flags|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{
		Family:  nl.FAMILY_ALL,
		Ifindex: int32(s.Ifindex),
		Handle:  s.Handle,
		Parent:  s.Parent,
		Info:    netlink.MakeHandle(s.Prio, nl.Swap16(s.Protocol)),
	})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated(string(s.Kind))))
	if cmd == unix.RTM_DELTFILTER {
		return req, nil
	}
	opts := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	ne := nl.NativeEndian().(binary.AppendByteOrder)
	switch s.Kind {
	case tcFw:
		opts.AddRtAttr(nl.TCA_FW_CLASSID, nl.Uint32Attr(s.ClassID))
		opts.AddRtAttr(nl.TCA_FW_MASK, nl.Uint32Attr(s.Mask))
	case tcU32Mark:
		// An empty selector with TERMINAL set matches every packet; the
		// mark is then the only condition, exactly what `tc ... u32
		// match mark V M classid C` sends.
		sel := nl.TcU32Sel{Flags: nl.TC_U32_TERMINAL}
		opts.AddRtAttr(nl.TCA_U32_SEL, sel.Serialize())
		opts.AddRtAttr(nl.TCA_U32_CLASSID, nl.Uint32Attr(s.ClassID))
		mark := ne.AppendUint32(ne.AppendUint32(ne.AppendUint32(nil, s.Mark), s.Mask), 0)
		opts.AddRtAttr(nl.TCA_U32_MARK, mark)
	case tcBPF:
		opts.AddRtAttr(nl.TCA_BPF_OPS_LEN, nl.Uint16Attr(uint16(len(s.BPF))))
		opts.AddRtAttr(nl.TCA_BPF_OPS, serializeBPF(s.BPF))
	default:
		return nil, fmt.Errorf("unknown filter kind %q", s.Kind)
	}
	req.AddData(opts)
	return req, nil
}

func (s tcFilterSpec) add() error {
	req, err := s.request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	if err != nil {
		return err
	}
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("add %s filter %#x → %s: %w", s.Kind, s.Mark, tcHandleString(s.ClassID), err)
	}
	return nil
}

func (s tcFilterSpec) del() error {
	req, _ := s.request(unix.RTM_DELTFILTER, 0)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("delete %s filter %#x: %w", s.Kind, s.Mark, err)
	}
	return nil
}

// tcDumpFilterOptions returns the TCA_OPTIONS attributes of every filter
// under parent, as the kernel reports them.
func tcDumpFilterOptions(ifindex int, parent uint32) ([]map[uint16][]byte, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETTFILTER, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Parent: parent})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWTFILTER)
	if err != nil {
		return nil, err
	}
	var out []map[uint16][]byte
	for _, m := range msgs {
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofTcMsg:])
		if err != nil {
			return nil, err
		}
		for _, a := range attrs {
			if a.Attr.Type != nl.TCA_OPTIONS {
				continue
			}
			inner, err := nl.ParseRouteAttr(a.Value)
			if err != nil {
				return nil, err
			}
			o := map[uint16][]byte{}
			for _, x := range inner {
				o[x.Attr.Type] = x.Value
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// tcKindMissing reports the errors the kernel gives for a classifier or
// qdisc kind it was built without (no module loading here).
func tcKindMissing(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EINVAL)
}

// tcChooseFilter finds the mark classifier this kernel really supports,
// by adding a probe filter (at tcProbePrio, towards probeClass) under the
// root qdisc and removing it again.
func tcChooseFilter(ifindex int, m tcMarkMap, probeField uint32) (tcFilterKind, error) {
	var errs []error
	for _, kind := range []tcFilterKind{tcFw, tcU32Mark} {
		s := tcFilterFor(kind, ifindex, m, probeField, tcProbePrio)
		err := s.add()
		if err != nil {
			if !tcKindMissing(err) {
				return "", err
			}
			errs = append(errs, err)
			continue
		}
		honoured := true
		if kind == tcU32Mark {
			opts, derr := tcDumpFilterOptions(ifindex, s.Parent)
			honoured = false
			for _, o := range opts {
				if _, ok := o[nl.TCA_U32_MARK]; ok {
					honoured = true
				}
			}
			if derr != nil {
				errs = append(errs, derr)
			}
		}
		if err := s.del(); err != nil {
			return "", fmt.Errorf("remove probe filter: %w", err)
		}
		if honoured {
			return kind, nil
		}
		errs = append(errs, errors.New("u32 accepted `match mark` but does not echo it (kernel without CONFIG_CLS_U32_MARK would match every packet)"))
	}
	s := tcFilterSpecs(tcBPF, ifindex, m, nil, tcProbePrio)[0]
	if err := s.add(); err != nil {
		return "", fmt.Errorf("no usable mark classifier (fw, u32 mark, bpf): %w", errors.Join(append(errs, err)...))
	}
	if err := s.del(); err != nil {
		return "", fmt.Errorf("remove probe filter: %w", err)
	}
	return tcBPF, nil
}
