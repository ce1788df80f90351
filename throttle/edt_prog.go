package throttle

import (
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// skbTstampOff is offsetof(struct __sk_buff, tstamp); skbLenOff of its len.
const (
	skbTstampOff = 152
	skbLenOff    = 0
)

// The program's stack: the IPv4 key, the lease's key, a new departure,
// the IPv6 key (16 bytes).
const (
	edtKey4Off   = -4
	edtDepartOff = -16
	edtKey6Off   = -32
)

// edtMaps are the two maps the program reads for one address family: the
// consumers' delays and their latest departures (as map FDs).
type edtMaps struct{ delays, last int }

// edtProgram stamps TCP segments from any of ports (none: any port) to a consumer in the
// delays map of its family with now + its delay, never earlier than a
// stamp they carry, while the heartbeat lasts. A segment with payload is
// also never stamped earlier than the consumer's last departure (the last
// map, which the program keeps), whether or not the consumer still has a
// delay. With no v6 maps (a kernel that refused that part) IPv6 passes
// untouched. It always returns TC_ACT_OK: it delays, it never drops or
// redirects. It is one BPF program, read top to bottom as the verifier
// reads it: its jumps go to labels inside it, one copy of the delay's
// code per family (suffixed 4 and 6).
func edtProgram(ports []uint16, writeOn WriteOn, v4 edtMaps, v6 *edtMaps, beat int) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadAbs(12, asm.Half),
	}
	if v6 != nil {
		insns = append(insns, asm.JEq.Imm(asm.R0, unix.ETH_P_IPV6, "ipv6"))
	}
	insns = append(insns, asm.JNE.Imm(asm.R0, unix.ETH_P_IP, "pass"))
	insns = append(insns, edtParse4(ports)...)
	insns = append(insns, edtDelay("4", writeOn, v4, edtKey4Off, beat)...)
	if v6 != nil {
		insns = append(insns, edtParse6(ports)...)
		insns = append(insns, edtDelay("6", writeOn, *v6, edtKey6Off, beat)...)
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"),
		asm.Return(),
	)
}

// edtParse4 reads an IPv4 frame (the EtherType checked): it jumps to
// "pass" unless it is TCP from one of ports, and leaves the payload length in R9
// (≤ 0: a pure ACK) and the destination (host order) at edtKey4Off.
func edtParse4(ports []uint16) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadAbs(14+9, asm.Byte),
		asm.JNE.Imm(asm.R0, unix.IPPROTO_TCP, "pass"),
		asm.LoadAbs(14, asm.Byte),
		asm.And.Imm(asm.R0, 0x0f),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R7, asm.R0), // IP header length
	}
	if len(ports) > 0 {
		insns = append(insns, asm.LoadInd(asm.R0, asm.R7, 14, asm.Half)) // TCP source port
		insns = append(insns, portJumps(ports, "port4")...)
	}
	return append(insns,
		// Payload length = IP total length − IP header − TCP header.
		asm.LoadInd(asm.R0, asm.R7, 14+12, asm.Byte).WithSymbol("port4"),
		asm.RSh.Imm(asm.R0, 4),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.Add.Reg(asm.R8, asm.R7),
		asm.LoadAbs(14+2, asm.Half),
		asm.Sub.Reg(asm.R0, asm.R8),
		asm.Mov.Reg(asm.R9, asm.R0),  // payload bytes (≤ 0: a pure ACK)
		asm.LoadAbs(14+16, asm.Word), // destination: the consumer
		asm.StoreMem(asm.RFP, edtKey4Off, asm.R0, asm.Word),
	)
}

// edtParse6 reads an IPv6 frame (label "ipv6"): it jumps to "pass" unless
// its next header is TCP (no extension headers: the target's own stack
// sends none on a TCP connection) from one of ports, and leaves the payload
// length in R9 and the destination's 16 bytes, in network order, at
// edtKey6Off. The payload is what the frame holds past the headers, not
// the header's payload length, which BIG TCP's large segments carry as 0.
func edtParse6(ports []uint16) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadAbs(14+6, asm.Byte).WithSymbol("ipv6"), // next header
		asm.JNE.Imm(asm.R0, unix.IPPROTO_TCP, "pass"),
	}
	if len(ports) > 0 {
		insns = append(insns, asm.LoadAbs(14+40, asm.Half)) // TCP source port
		insns = append(insns, portJumps(ports, "port6")...)
	}
	return append(insns,
		// Payload length = frame length − Ethernet, IPv6 and TCP headers.
		asm.LoadAbs(14+40+12, asm.Byte).WithSymbol("port6"),
		asm.RSh.Imm(asm.R0, 4),
		asm.LSh.Imm(asm.R0, 2),
		asm.LoadMem(asm.R9, asm.R6, skbLenOff, asm.Word),
		asm.Sub.Imm(asm.R9, 14+40),
		asm.Sub.Reg(asm.R9, asm.R0), // payload bytes (≤ 0: a pure ACK)
		// The destination, the consumer, copied as it is on the wire.
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 14+24),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, edtKey6Off),
		asm.Mov.Imm(asm.R4, 16),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
	)
}

// edtDelay is the delay of one family, past its parse: the consumer's key
// at stack key, the payload length in R9. Registers: R6 the context, R7
// now, R8 the delay and then the departure. Its labels end in sfx; it
// ends by jumping to "pass".
func edtDelay(sfx string, writeOn WriteOn, m edtMaps, key int16, beat int) asm.Instructions {
	delayed, ack, payload, due, hold, stamp := "delayed"+sfx, "ack"+sfx, "payload"+sfx, "due"+sfx, "hold"+sfx, "stamp"+sfx
	insns := leaseCheck(beat)
	insns = append(insns, asm.Mov.Imm(asm.R8, 0))
	insns = append(insns, lookupAt(m.delays, key, delayed)...)
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), // read delay
		asm.LoadMem(asm.R2, asm.R0, 8, asm.DWord), // write delay
		asm.JSLE.Imm(asm.R9, 0, ack),
		asm.Mov.Reg(asm.R8, asm.R1),
	)
	if writeOn == WriteOnReplies {
		insns = append(insns,
			asm.JGE.Reg(asm.R8, asm.R2, delayed),
			asm.Mov.Reg(asm.R8, asm.R2),
		)
	}
	insns = append(insns, asm.Ja.Label(delayed))
	if writeOn == WriteOnACKs {
		insns = append(insns, asm.Mov.Reg(asm.R8, asm.R2).WithSymbol(ack))
	} else {
		insns = append(insns, asm.Mov.Imm(asm.R8, 0).WithSymbol(ack))
	}
	return append(insns,
		// R8 is the delay (0 for a consumer without one).
		asm.FnKtimeGetNs.Call().WithSymbol(delayed),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.JSGT.Imm(asm.R9, 0, payload),
		// A pure ACK: now + delay, if any.
		asm.JEq.Imm(asm.R8, 0, "pass"),
		asm.Add.Reg(asm.R8, asm.R7),
		asm.LoadMem(asm.R1, asm.R6, skbTstampOff, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R8, "pass"), // the sender's own stamp is later
		asm.StoreMem(asm.R6, skbTstampOff, asm.R8, asm.DWord),
		asm.Ja.Label("pass"),
		// A segment with payload: now + delay, no earlier than the
		// consumer's last departure nor than the sender's own stamp.
		asm.Add.Reg(asm.R8, asm.R7).WithSymbol(payload),
		asm.LoadMapPtr(asm.R1, m.last),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, due),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JGE.Reg(asm.R8, asm.R1, due),
		asm.Mov.Reg(asm.R8, asm.R1),
		asm.JGT.Reg(asm.R8, asm.R7, hold).WithSymbol(due),
		asm.Ja.Label("pass"), // nothing of the consumer's is held, and no delay
		asm.LoadMem(asm.R1, asm.R6, skbTstampOff, asm.DWord).WithSymbol(hold),
		asm.JGE.Reg(asm.R8, asm.R1, stamp),
		asm.Mov.Reg(asm.R8, asm.R1), // the sender's own stamp is later
		asm.StoreMem(asm.R6, skbTstampOff, asm.R8, asm.DWord).WithSymbol(stamp),
		asm.StoreMem(asm.RFP, edtDepartOff, asm.R8, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.last),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, edtDepartOff),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		asm.Ja.Label("pass"),
	)
}

// portJumps go to "pass" unless R0 (a TCP port) is one of ports, and on
// to the instruction labelled next otherwise: one comparison per port,
// as the config's few ports (at most 15) need no map.
func portJumps(ports []uint16, next string) asm.Instructions {
	var insns asm.Instructions
	for _, p := range ports[:len(ports)-1] {
		insns = append(insns, asm.JEq.Imm(asm.R0, int32(p), next))
	}
	return append(insns, asm.JNE.Imm(asm.R0, int32(ports[len(ports)-1]), "pass"))
}
