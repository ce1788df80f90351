package throttle

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// runBPF runs the program as sent (prog, disassembled) in x/net/bpf's VM
// with mark as the packet's skb->mark: it is how the tests check the
// program's meaning and not just its bytes. The VM implements no
// extension but the length, so the mark load, which must be the first
// instruction, becomes a load of the packet's first word, and the packet
// is the mark.
func runBPF(t *testing.T, prog []bpf.RawInstruction, mark uint32) uint32 {
	t.Helper()
	ins, ok := bpf.Disassemble(prog)
	if !ok {
		t.Fatalf("program does not disassemble: %v", ins)
	}
	if ins[0] != (bpf.LoadExtension{Num: bpf.ExtMark}) {
		t.Fatalf("first instruction %v, not the load of the mark", ins[0])
	}
	ins[0] = bpf.LoadAbsolute{Off: 0, Size: 4}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	out, err := vm.Run(binary.BigEndian.AppendUint32(nil, mark))
	if err != nil {
		t.Fatal(err)
	}
	return uint32(out)
}

// handEncoded is the program as tc.go encoded it by hand, from
// linux/filter.h's opcodes, before x/net/bpf assembled it: the kernel
// must still get these very instructions.
func handEncoded(m tcMarkMap) []bpf.RawInstruction {
	return []bpf.RawInstruction{
		{Op: 0x20, K: 0xfffff000 + 20},       // BPF_LD|BPF_W|BPF_ABS, SKF_AD_OFF + SKF_AD_MARK
		{Op: 0x54, K: m.Mask},                // BPF_ALU|BPF_AND|BPF_K
		{Op: 0x15, Jt: 4, K: 0},              // BPF_JMP|BPF_JEQ|BPF_K
		{Op: 0x74, K: uint32(m.shift())},     // BPF_ALU|BPF_RSH|BPF_K
		{Op: 0x04, K: uint32(m.Offset)},      // BPF_ALU|BPF_ADD|BPF_K
		{Op: 0x44, K: uint32(m.Major) << 16}, // BPF_ALU|BPF_OR|BPF_K
		{Op: 0x16},                           // BPF_RET|BPF_A
		{Op: 0x06, K: 0},                     // BPF_RET|BPF_K
	}
}

func TestBPFProgramAsHandEncoded(t *testing.T) {
	for _, m := range []tcMarkMap{
		{Major: 0x5142, Mask: DefaultMarkMask, Offset: 1},
		{Major: 0x5100, Mask: 0xff00, Offset: 0},
		{Major: 0x52ff, Mask: 0xff, Offset: 2},
		{Major: 0x5180, Mask: 0xffff0000, Offset: 0},
	} {
		if got, want := tcBPFProgram(m), handEncoded(m); !slices.Equal(got, want) {
			t.Errorf("%+v:\n got  %v\n want %v", m, got, want)
		}
	}
}

func TestNetemBPFClassifierMapsMarkToClass(t *testing.T) {
	m := tcMarkMap{Major: 0x5142, Mask: DefaultMarkMask, Offset: 1}
	prog := tcBPFProgram(m)
	for _, tc := range []struct {
		mark, want uint32
	}{
		{0, 0},                   // unmarked: no match → default class
		{0x0000ffff, 0},          // someone else's bits only
		{0x00010000, 0x51420002}, // step 1 → 5142:2, as the thesis' mark 1 → 1:2
		{0xf001beef, 0x51420002}, // foreign bits around ours are ignored
		{0x00280000, 0x51420029}, // step 40
		{0x0fff0000, 0x51421000}, // widest field
	} {
		if got := runBPF(t, prog, tc.mark); got != tc.want {
			t.Errorf("mark %#x → classid %#x, want %#x", tc.mark, got, tc.want)
		}
	}
	// Offset 0 (HTB: field = minor).
	h := tcMarkMap{Major: 0x5100, Mask: 0xff00, Offset: 0}
	if got := runBPF(t, tcBPFProgram(h), 0x1234); got != 0x51000012 {
		t.Errorf("htb mapping: %#x", got)
	}
	// The serialised form is struct sock_filter {u16 code; u8 jt, jf; u32 k}.
	b := serializeBPF(prog)
	if len(b) != 8*len(prog) {
		t.Fatalf("len %d", len(b))
	}
	ne := nl.NativeEndian()
	if ne.Uint16(b[0:]) != 0x20 || ne.Uint32(b[4:]) != 0xfffff014 || b[2*8+2] != 4 {
		t.Errorf("unexpected encoding % x", b[:24])
	}
}

func TestHTBMarkMaskChecks(t *testing.T) {
	for mask, ok := range map[uint32]bool{
		DefaultMarkMask: true, 0xff: true, 0xffff0000: true,
		0: false, 0x0f0f0000: false, 0x1ffff: false,
	} {
		if err := checkMarkMask(mask); (err == nil) != ok {
			t.Errorf("checkMarkMask(%#x) = %v", mask, err)
		}
	}
	for label, ok := range map[string]bool{"sanqos": true, "sanqos-lab": true, "a_b-1": true,
		"": false, "x y": false, "-x": false, "abcdefghijklmnopqrstu": false, "a.b": false} {
		if err := tcCheckLabel(label); (err == nil) != ok {
			t.Errorf("tcCheckLabel(%q) = %v", label, err)
		}
	}
	if a, b := tcRootMajor("sanqos"), tcRootMajor("sanqos-lab"); a>>8 != 0x51 || b>>8 != 0x51 || a == b {
		t.Errorf("root majors %#x %#x", a, b)
	}
}

// parseRequest splits a serialised tc request into its tcmsg and its
// attributes (TCA_OPTIONS nested ones under key 1000+type).
func parseRequest(t *testing.T, req *nl.NetlinkRequest) (*nl.TcMsg, map[int][]byte) {
	t.Helper()
	b := req.Serialize()[unix.SizeofNlMsghdr:]
	msg := nl.DeserializeTcMsg(b)
	attrs, err := nl.ParseRouteAttr(b[nl.SizeofTcMsg:])
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]byte{}
	for _, a := range attrs {
		out[int(a.Attr.Type)] = a.Value
		if a.Attr.Type == nl.TCA_OPTIONS {
			inner, err := nl.ParseRouteAttr(a.Value)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range inner {
				out[1000+int(x.Attr.Type)] = x.Value
			}
		}
	}
	return msg, out
}

func TestNetemFilterMessages(t *testing.T) {
	ne := nl.NativeEndian()
	m := tcMarkMap{Major: 0x5142, Mask: DefaultMarkMask, Offset: 1}
	kind := func(a map[int][]byte) string { return string(bytes.TrimRight(a[nl.TCA_KIND], "\x00")) }

	// fw: handle is the mark, mask restricts it to our bits.
	fw := tcFilterFor(tcFw, 7, m, 3, tcFilterPrio)
	req, err := fw.request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	if err != nil {
		t.Fatal(err)
	}
	msg, a := parseRequest(t, req)
	if kind(a) != "fw" || msg.Ifindex != 7 || msg.Handle != 0x30000 || msg.Parent != 0x51420000 ||
		msg.Info != netlink.MakeHandle(tcFilterPrio, nl.Swap16(unix.ETH_P_ALL)) {
		t.Errorf("fw tcmsg %+v kind %q", msg, kind(a))
	}
	if ne.Uint32(a[1000+nl.TCA_FW_CLASSID]) != 0x51420004 || ne.Uint32(a[1000+nl.TCA_FW_MASK]) != DefaultMarkMask {
		t.Errorf("fw options %v", a)
	}

	// u32: empty terminal selector + TCA_U32_MARK {val, mask, success}.
	u := tcFilterFor(tcU32Mark, 7, m, 3, tcFilterPrio)
	req, _ = u.request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	msg, a = parseRequest(t, req)
	if kind(a) != "u32" || msg.Handle != 0x80000003 || msg.Info != netlink.MakeHandle(tcFilterPrio, nl.Swap16(unix.ETH_P_IP)) {
		t.Errorf("u32 tcmsg %+v", msg)
	}
	mk := a[1000+nl.TCA_U32_MARK]
	if len(mk) != 12 || ne.Uint32(mk) != 0x30000 || ne.Uint32(mk[4:]) != DefaultMarkMask || ne.Uint32(mk[8:]) != 0 {
		t.Errorf("u32 mark % x", mk)
	}
	sel := a[1000+nl.TCA_U32_SEL]
	if len(sel) != nl.SizeofTcU32Sel || sel[0] != nl.TC_U32_TERMINAL || sel[2] != 0 {
		t.Errorf("u32 selector % x", sel)
	}
	if ne.Uint32(a[1000+nl.TCA_U32_CLASSID]) != 0x51420004 {
		t.Errorf("u32 classid")
	}

	// bpf: one filter, ops = the program.
	specs := tcFilterSpecs(tcBPF, 7, m, []uint32{1, 2, 3}, tcFilterPrio)
	if len(specs) != 1 {
		t.Fatalf("bpf: %d filters", len(specs))
	}
	req, _ = specs[0].request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	_, a = parseRequest(t, req)
	if kind(a) != "bpf" || ne.Uint16(a[1000+nl.TCA_BPF_OPS_LEN]) != 8 || !bytes.Equal(a[1000+nl.TCA_BPF_OPS], serializeBPF(tcBPFProgram(m))) {
		t.Errorf("bpf options %v", a)
	}
	if got := len(tcFilterSpecs(tcU32Mark, 7, m, []uint32{1, 2, 3}, tcFilterPrio)); got != 3 {
		t.Errorf("u32: %d filters, want one per mark", got)
	}
	// Deletion carries no options.
	req, _ = u.request(unix.RTM_DELTFILTER, 0)
	if _, a = parseRequest(t, req); a[nl.TCA_OPTIONS] != nil {
		t.Error("delete request with options")
	}
}

func TestHTBIpsetSkbmarkMessage(t *testing.T) {
	req := tcIpsetAddRequest("sanqos-rate", netip.MustParseAddr("10.1.2.3"), 0x120000, DefaultMarkMask)
	b := req.Serialize()
	typ := nl.NativeEndian().Uint16(b[4:])
	if typ != unix.NFNL_SUBSYS_IPSET<<8|nl.IPSET_CMD_ADD {
		t.Fatalf("type %#x", typ)
	}
	attrs, err := nl.ParseRouteAttr(b[unix.SizeofNlMsghdr+nl.SizeofNfgenmsg:])
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case nl.IPSET_ATTR_SETNAME:
			if string(a.Value) != "sanqos-rate\x00" {
				t.Errorf("set name %q", a.Value)
			}
		case nl.IPSET_ATTR_DATA:
			inner, _ := nl.ParseRouteAttr(a.Value)
			for _, x := range inner {
				if x.Attr.Type&nl.NLA_TYPE_MASK == nl.IPSET_ATTR_SKBMARK {
					found = true
					if binary.BigEndian.Uint32(x.Value) != 0x120000 || binary.BigEndian.Uint32(x.Value[4:]) != DefaultMarkMask {
						t.Errorf("skbmark % x", x.Value)
					}
				}
			}
		}
	}
	if !found {
		t.Error("no IPSET_ATTR_SKBMARK")
	}
}

func TestHTBBufferAndQuantum(t *testing.T) {
	for _, tc := range []struct {
		rate      uint64
		buf, quan uint32
	}{
		{1 << 20, 65536 + 1600, 104857},
		{MaxRate, 125000000, 200000},
		{100, 10000, 1600},
	} {
		if b, q := tcHtbBuffer(tc.rate), tcHtbQuantum(tc.rate); b != tc.buf || q != tc.quan {
			t.Errorf("rate %d: buffer %d quantum %d, want %d %d", tc.rate, b, q, tc.buf, tc.quan)
		}
	}
}

func TestNetemPureACKRuleText(t *testing.T) {
	// The rule must keep its three tests; a "simplification" to -m length
	// would bring back the reordering the comment explains.
	got := fmt.Sprint(tcPureACK)
	for _, want := range []string{"--tcp-flags SYN,FIN,RST,ACK ACK", "! --u32 0>>22&0x3C@12>>26&0x3C@0=0:4294967295", "--u32 0&0x3=0"} {
		if !bytes.Contains([]byte(got), []byte(want)) {
			t.Errorf("pure-ACK match %q lacks %q", got, want)
		}
	}
}

// A reinstall replaces, in one iptables-restore, the label's rules that
// iptables-save shows outside its chains (deleted by their saved text,
// quotes and all) and empties its own chains by declaring them; other
// labels' and other tools' rules are left alone, and an argument
// iptables-restore would split or unquote is refused.
func TestTCLabelledRulesForRestore(t *testing.T) {
	saved := `# Generated by iptables-save v1.8.9 on Thu Nov 26 13:57:41 2026
*mangle
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:sq-tc - [0:0]
-A POSTROUTING -o eth0 -p tcp -m tcp --sport 3260 -m set --match-set sq-rate dst -m comment --comment "sanqos-tc:sq" -j sq-tc
-A POSTROUTING -o eth0 -j ACCEPT
-A POSTROUTING -o eth0 -m comment --comment sanqos-tc:sq2 -j sq2-tc
-A FORWARD -m comment --comment sanqos-tc:sq -j sq-tc
-A sq-tc -m comment --comment "sanqos-tc:sq" -j SET --map-set sq-rate dst --map-mark
COMMIT
`
	got := tcLabelledRules(saved, "sq")
	want := []string{
		`POSTROUTING -o eth0 -p tcp -m tcp --sport 3260 -m set --match-set sq-rate dst -m comment --comment "sanqos-tc:sq" -j sq-tc`,
		`FORWARD -m comment --comment sanqos-tc:sq -j sq-tc`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("labelled rules\n%q\nwant\n%q", got, want)
	}
	var in strings.Builder
	if err := restoreRule(&in, "sq-tc", tcMapSpec("sq-rate")); err != nil || in.String() != "-A sq-tc -j SET --map-set sq-rate dst --map-mark\n" {
		t.Errorf("restore line %q, %v", in.String(), err)
	}
	for _, bad := range []string{"a b", `a"b`, "", `a\b`} {
		if err := restoreRule(&in, "sq-tc", []string{"-m", "comment", "--comment", bad}); err == nil {
			t.Errorf("argument %q accepted", bad)
		}
	}
}
