package nvmetcp

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ConnectIn reads the Fabrics Connect a TCP segment's payload starts
// with, alone or after the queue's ICReq: where a host's first command
// on a connection travels (it waits for the ICResp, then sends the
// Connect, 1096 bytes, in one segment on any MTU of 1280 or more).
func ConnectIn(payload []byte) (Connect, bool) {
	if len(payload) >= 128 && payload[0] == TypeICReq && payload[2] == 128 {
		payload = payload[128:]
	}
	h, err := DecodeHeader(payload)
	if err != nil || !h.IsConnect() || int(h.PLen) > len(payload) {
		return Connect{}, false
	}
	return ParseConnect(h, inCapsule(h, payload[:h.PLen]))
}

// ConnectFilter is a classic BPF program for a cooked (SOCK_DGRAM)
// AF_PACKET socket that passes only TCP segments (IPv4, or IPv6 without
// extension headers) whose payload starts with a Connect capsule
// (CapsuleCmd, header length 72, opcode 0x7f, fctype 0x01), alone or
// after an ICReq, on any port. The storage traffic itself never
// reaches user space: one segment per queue set-up does.
func ConnectFilter() ([]bpf.RawInstruction, error) {
	const reject = 33 // the index of the reject; skips count from the next
	prog := []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 0, Size: 1},
		/* 1 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0},
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x40, SkipFalse: 6}, // → 9 (IPv6?)
		// IPv4: TCP, first fragment only; X = header length.
		/* 3 */ bpf.LoadAbsolute{Off: 9, Size: 1},
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_TCP, SkipFalse: reject - 5},
		/* 5 */ bpf.LoadAbsolute{Off: 6, Size: 2},
		/* 6 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: reject - 7},
		/* 7 */ bpf.LoadMemShift{Off: 0},
		/* 8 */ bpf.Jump{Skip: 4}, // → 13
		// IPv6: next header TCP; X = 40.
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x60, SkipFalse: reject - 10},
		/* 10 */ bpf.LoadAbsolute{Off: 6, Size: 1},
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_TCP, SkipFalse: reject - 12},
		/* 12 */ bpf.LoadConstant{Dst: bpf.RegX, Val: 40},
		// X += the TCP header's length: X is the payload's offset.
		/* 13 */ bpf.LoadIndirect{Off: 12, Size: 1},
		/* 14 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0},
		/* 15 */ bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 2},
		/* 16 */ bpf.ALUOpX{Op: bpf.ALUOpAdd},
		/* 17 */ bpf.TAX{},
		// An ICReq first (type 0, flags 0, header length 128): past it.
		/* 18 */ bpf.LoadIndirect{Off: 0, Size: 2},
		/* 19 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 5}, // → 25
		/* 20 */ bpf.LoadIndirect{Off: 2, Size: 1},
		/* 21 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 128, SkipFalse: reject - 22},
		/* 22 */ bpf.TXA{},
		/* 23 */ bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 128},
		/* 24 */ bpf.TAX{},
		// CapsuleCmd, header length 72, opcode 0x7f, fctype 0x01.
		/* 25 */ bpf.LoadIndirect{Off: 0, Size: 1},
		/* 26 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: TypeCapsuleCmd, SkipFalse: reject - 27},
		/* 27 */ bpf.LoadIndirect{Off: 2, Size: 1},
		/* 28 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 72, SkipFalse: reject - 29},
		/* 29 */ bpf.LoadIndirect{Off: 8, Size: 1},
		/* 30 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: OpcodeFabrics, SkipFalse: reject - 31},
		/* 31 */ bpf.LoadIndirect{Off: 12, Size: 1},
		/* 32 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: FctypeConnect, SkipTrue: 1}, // → 34
		/* 33 */ bpf.RetConstant{Val: 0},
		/* 34 */ bpf.RetConstant{Val: 64 << 10},
	}
	return bpf.Assemble(prog)
}
