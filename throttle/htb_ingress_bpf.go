package throttle

// The write-cap lease: a small eBPF classifier on the target's ingress
// that redirects a consumer's packets to the IFB only while its entry in a
// BPF hash map holds a deadline in the future. The agent pushes every
// deadline forward three times per TTL (markLease); when the agent dies,
// the deadlines pass, the redirect stops and the consumer's writes arrive
// uncapped: the ingress equivalent of the egress marks' ipset timeouts.
//
// Why eBPF: the lease has to expire inside the kernel, and this kernel has
// no ingress classifier that can consult anything with a timeout (no
// em_ipset, basic, flower, act_connmark or act_ctinfo; iptables marks are
// set after tc ingress). cls_bpf and bpf(2) are present, and eBPF can read
// the clock (bpf_ktime_get_ns). The program is 32 instructions, built
// here like the classic mark program in tc.go, so no BPF toolchain or
// library is needed.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// eBPF opcodes (linux/bpf.h, linux/bpf_common.h).
const (
	ebpfMov64X  = 0xbf // BPF_ALU64|BPF_MOV|BPF_X
	ebpfMov64K  = 0xb7 // BPF_ALU64|BPF_MOV|BPF_K
	ebpfAdd64K  = 0x07 // BPF_ALU64|BPF_ADD|BPF_K
	ebpfAnd64K  = 0x57 // BPF_ALU64|BPF_AND|BPF_K
	ebpfLsh64K  = 0x67 // BPF_ALU64|BPF_LSH|BPF_K
	ebpfLdAbsB  = 0x30 // BPF_LD|BPF_ABS|BPF_B
	ebpfLdAbsH  = 0x28 // BPF_LD|BPF_ABS|BPF_H
	ebpfLdAbsW  = 0x20 // BPF_LD|BPF_ABS|BPF_W
	ebpfLdIndB  = 0x50 // BPF_LD|BPF_IND|BPF_B
	ebpfLdIndH  = 0x48 // BPF_LD|BPF_IND|BPF_H
	ebpfAdd64X  = 0x0f // BPF_ALU64|BPF_ADD|BPF_X
	ebpfRsh64K  = 0x77 // BPF_ALU64|BPF_RSH|BPF_K
	ebpfLdImm64 = 0x18 // BPF_LD|BPF_IMM|BPF_DW
	ebpfStxW    = 0x63 // BPF_STX|BPF_MEM|BPF_W
	ebpfLdxDW   = 0x79 // BPF_LDX|BPF_MEM|BPF_DW
	ebpfJneK    = 0x55 // BPF_JMP|BPF_JNE|BPF_K
	ebpfJeqK    = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
	ebpfJeqX    = 0x1d // BPF_JMP|BPF_JEQ|BPF_X
	ebpfJgeX    = 0x3d // BPF_JMP|BPF_JGE|BPF_X (unsigned)
	ebpfCall    = 0x85
	ebpfExit    = 0x95

	ebpfPseudoMapFD = 1 // src_reg of ld_imm64: imm is a map fd

	ebpfFuncMapLookup = 1 // bpf_map_lookup_elem
	ebpfFuncKtime     = 5 // bpf_ktime_get_ns (CLOCK_MONOTONIC)

	// skfNetOff makes LD_ABS/LD_IND offsets relative to the network
	// header, whatever the link layer in front of it.
	skfNetOff = -0x100000
)

type ebpfInsn struct {
	Code     uint8
	Dst, Src uint8
	Off      int16
	Imm      int32
}

// ebpfLeaseProgram matches (returns -1, so the filter's mirred action
// runs) IPv4 TCP segments with payload to port whose source address has a
// map entry (key: the address as LD_ABS returns it, in host order; value:
// a u64 CLOCK_MONOTONIC deadline in ns) that has not passed; everything
// else returns 0, "no match", and goes on unredirected. port 0 matches any
// TCP port.
//
// Pure ACKs are not redirected: they carry no write data, and a consumer
// that also reads would otherwise have the ACKs of its reads queued
// behind its capped writes, slowing the reads it was not capped for. An
// ACK that overtakes the consumer's queued data is harmless: the two run
// in opposite directions' sequence spaces, and a data segment carrying
// an older ACK is not a duplicate ACK. Non-first IP fragments read port
// and offsets from payload and are then rarely matched; storage traffic
// is not fragmented (PMTU discovery).
func ebpfLeaseProgram(mapFD int, port uint16) []ebpfInsn {
	p := []ebpfInsn{
		{Code: ebpfMov64X, Dst: 6, Src: 1}, // r6 = skb (LD_ABS wants it there)
		{Code: ebpfLdAbsB, Imm: skfNetOff + 9},
		{Code: ebpfJneK, Dst: 0, Imm: unix.IPPROTO_TCP}, // → miss, patched below
		{Code: ebpfLdAbsB, Imm: skfNetOff + 0},
		{Code: ebpfAnd64K, Dst: 0, Imm: 0x0f},
		{Code: ebpfLsh64K, Dst: 0, Imm: 2},
		{Code: ebpfMov64X, Dst: 7, Src: 0}, // r7 = IP header length
	}
	if port != 0 {
		p = append(p,
			ebpfInsn{Code: ebpfLdIndH, Src: 7, Imm: skfNetOff + 2}, // TCP destination port
			ebpfInsn{Code: ebpfJneK, Dst: 0, Imm: int32(port)},     // → miss
		)
	}
	p = append(p,
		ebpfInsn{Code: ebpfLdAbsH, Imm: skfNetOff + 2}, // IP total length
		ebpfInsn{Code: ebpfMov64X, Dst: 8, Src: 0},
		ebpfInsn{Code: ebpfLdIndB, Src: 7, Imm: skfNetOff + 12}, // TCP data offset << 4
		ebpfInsn{Code: ebpfRsh64K, Dst: 0, Imm: 4},
		ebpfInsn{Code: ebpfLsh64K, Dst: 0, Imm: 2},
		ebpfInsn{Code: ebpfAdd64X, Dst: 0, Src: 7}, // both headers
		ebpfInsn{Code: ebpfJeqX, Dst: 8, Src: 0},   // no payload → miss
	)
	p = append(p,
		ebpfInsn{Code: ebpfLdAbsW, Imm: skfNetOff + 12}, // source address
		ebpfInsn{Code: ebpfStxW, Dst: 10, Src: 0, Off: -4},
		ebpfInsn{Code: ebpfLdImm64, Dst: 1, Src: ebpfPseudoMapFD, Imm: int32(mapFD)},
		ebpfInsn{},
		ebpfInsn{Code: ebpfMov64X, Dst: 2, Src: 10},
		ebpfInsn{Code: ebpfAdd64K, Dst: 2, Imm: -4},
		ebpfInsn{Code: ebpfCall, Imm: ebpfFuncMapLookup},
		ebpfInsn{Code: ebpfJeqK, Dst: 0, Off: 0, Imm: 0}, // no entry → miss
		ebpfInsn{Code: ebpfMov64X, Dst: 7, Src: 0},
		ebpfInsn{Code: ebpfCall, Imm: ebpfFuncKtime},
		ebpfInsn{Code: ebpfLdxDW, Dst: 1, Src: 7, Off: 0}, // deadline
		ebpfInsn{Code: ebpfJgeX, Dst: 0, Src: 1, Off: 0},  // now ≥ deadline → miss
		ebpfInsn{Code: ebpfMov64K, Dst: 0, Imm: -1},
		ebpfInsn{Code: ebpfExit},
		ebpfInsn{Code: ebpfMov64K, Dst: 0, Imm: 0}, // miss
		ebpfInsn{Code: ebpfExit},
	)
	miss := len(p) - 2
	for i := range p {
		switch p[i].Code {
		case ebpfJneK, ebpfJeqK, ebpfJeqX, ebpfJgeX:
			p[i].Off = int16(miss - i - 1)
		}
	}
	return p
}

func serializeEBPF(prog []ebpfInsn) []byte {
	ne := nl.NativeEndian().(binary.AppendByteOrder)
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		regs := in.Dst&0xf | in.Src<<4
		if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big-endian host: dst in the high nibble
			regs = in.Dst<<4 | in.Src&0xf
		}
		b = append(b, in.Code, regs)
		b = ne.AppendUint16(b, uint16(in.Off))
		b = ne.AppendUint32(b, uint32(in.Imm))
	}
	return b
}

// bpfSys is bpf(2) with attr as its union bpf_attr (zero-padded: the
// kernel refuses unknown non-zero tail bytes, so zeros are safe).
func bpfSys(cmd int, attr []byte) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	runtime.KeepAlive(attr)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// ingressLease is the map and program of one backend's ingress redirect.
type ingressLease struct {
	mapFD, progFD int
}

// leaseKey is the map key of a: the address as the program's LD_ABS
// loads it (host order), stored the way the program stores it.
func leaseKey(a netip.Addr) []byte {
	b := a.Unmap().As4()
	return binary.NativeEndian.AppendUint32(nil, binary.BigEndian.Uint32(b[:]))
}

func newIngressLease(maxEntries int, port uint16) (*ingressLease, error) {
	attr := make([]byte, 128)
	ne := binary.NativeEndian
	ne.PutUint32(attr[0:], unix.BPF_MAP_TYPE_HASH)
	ne.PutUint32(attr[4:], 4) // key: IPv4 address
	ne.PutUint32(attr[8:], 8) // value: deadline
	ne.PutUint32(attr[12:], uint32(maxEntries))
	mfd, err := bpfSys(unix.BPF_MAP_CREATE, attr)
	if err != nil {
		return nil, fmt.Errorf("create bpf lease map: %w", err)
	}
	insns := serializeEBPF(ebpfLeaseProgram(mfd, port))
	license := []byte("GPL\x00")
	logBuf := make([]byte, 64<<10)
	attr = make([]byte, 128)
	ne.PutUint32(attr[0:], unix.BPF_PROG_TYPE_SCHED_CLS)
	ne.PutUint32(attr[4:], uint32(len(insns)/8))
	ne.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&insns[0]))))
	ne.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	ne.PutUint32(attr[24:], 1) // log level: errors
	ne.PutUint32(attr[28:], uint32(len(logBuf)))
	ne.PutUint64(attr[32:], uint64(uintptr(unsafe.Pointer(&logBuf[0]))))
	copy(attr[48:64], "sanqos_wlease")
	pfd, err := bpfSys(unix.BPF_PROG_LOAD, attr)
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	runtime.KeepAlive(logBuf)
	if err != nil {
		unix.Close(mfd)
		msg := string(logBuf[:max(0, indexZero(logBuf))])
		return nil, fmt.Errorf("load bpf lease program: %w (verifier: %s)", err, msg)
	}
	return &ingressLease{mapFD: mfd, progFD: pfd}, nil
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// monoNow is CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// put sets a's deadline (an add or a refresh: BPF_ANY).
func (l *ingressLease) put(a netip.Addr, deadline uint64) error {
	key := leaseKey(a)
	val := binary.NativeEndian.AppendUint64(nil, deadline)
	attr := make([]byte, 32)
	ne := binary.NativeEndian
	ne.PutUint32(attr[0:], uint32(l.mapFD))
	ne.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&key[0]))))
	ne.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&val[0]))))
	_, err := bpfSys(unix.BPF_MAP_UPDATE_ELEM, attr)
	runtime.KeepAlive(key)
	runtime.KeepAlive(val)
	if err != nil {
		return fmt.Errorf("lease of %v: %w", a, err)
	}
	return nil
}

func (l *ingressLease) del(a netip.Addr) error {
	key := leaseKey(a)
	attr := make([]byte, 32)
	binary.NativeEndian.PutUint32(attr[0:], uint32(l.mapFD))
	binary.NativeEndian.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&key[0]))))
	_, err := bpfSys(unix.BPF_MAP_DELETE_ELEM, attr)
	runtime.KeepAlive(key)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("end lease of %v: %w", a, err)
	}
	return nil
}

func (l *ingressLease) close() {
	if l == nil {
		return
	}
	unix.Close(l.progFD)
	unix.Close(l.mapFD)
}

// ingressRedirectSpec is the lease filter on a device's ingress: the
// program above, with a mirred action that sends matching packets to the
// IFB's egress (where its HTB tree shapes them).
type ingressRedirectSpec struct {
	Ifindex  int
	Parent   uint32 // ffff:fff2 under clsact, ffff:0 under ingress
	Prio     uint16
	Name     string // labels the filter for CleanupTC
	ProgFD   int
	IFBIndex int
}

func (s ingressRedirectSpec) request(cmd, flags int) (*nl.NetlinkRequest, error) {
	req := nl.NewNetlinkRequest(cmd, flags|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{
		Family:  nl.FAMILY_ALL,
		Ifindex: int32(s.Ifindex),
		Handle:  1,
		Parent:  s.Parent,
		Info:    netlink.MakeHandle(s.Prio, nl.Swap16(unix.ETH_P_IP)),
	})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bpf")))
	if cmd == unix.RTM_DELTFILTER {
		return req, nil
	}
	opts := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	opts.AddRtAttr(nl.TCA_BPF_FD, nl.Uint32Attr(uint32(s.ProgFD)))
	opts.AddRtAttr(nl.TCA_BPF_NAME, nl.ZeroTerminated(s.Name))
	act := opts.AddRtAttr(nl.TCA_BPF_ACT, nil)
	if err := netlink.EncodeActions(act, []netlink.Action{netlink.NewMirredAction(s.IFBIndex)}); err != nil {
		return nil, err
	}
	req.AddData(opts)
	return req, nil
}

func (s ingressRedirectSpec) add() error {
	req, err := s.request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	if err != nil {
		return err
	}
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("add ingress redirect filter: %w", err)
	}
	return nil
}
