package nvmetcp

import (
	"testing"
	"time"
)

// FuzzFeed: arbitrary bytes, cut anywhere, in both directions, never
// panic, and the state stays bounded. The seed corpus is synthetic
// traffic (here) and the guest's captured connects and I/O
// (testdata/fuzz/FuzzFeed).
func FuzzFeed(f *testing.F) {
	cat := func(ps ...pdu) []byte {
		var b []byte
		for _, p := range ps {
			b = append(b, p.bytes()...)
		}
		return b
	}
	hd := pdu{typ: TypeICReq, dig: Digests{true, true}}
	f.Add(cat(icReq, connect(1, "nqn.h", "nqn.s"), read(1, 1), write(2, 1, 100)), cat(icResp, resp(0x1001, 0), c2h(1, 512, FlagLast|FlagSuccess), r2t(2, 1, 4096), resp(2, 0)), uint8(7))
	f.Add(cat(hd, pdu{typ: TypeCapsuleCmd, opcode: OpcodeRead, cid: 4, dig: Digests{true, true}}), cat(pdu{typ: TypeICResp, dig: Digests{true, true}}), uint8(1))
	f.Add([]byte{TypeCapsuleCmd, 0, 72, 72, 0xff, 0xff, 0xff, 0xff}, []byte{TypeC2HData, 0x0c, 24, 24, 0, 0, 0, 0x01}, uint8(3))
	f.Fuzz(func(t *testing.T, toTarget, toInitiator []byte, split uint8) {
		tr := NewTracker(Options{MaxOutstanding: 64}, nil)
		n := int(split%64) + 1
		for i := 0; len(toTarget)+len(toInitiator) > 0; i++ {
			b, d := &toTarget, ToTarget
			if i%2 == 1 {
				b, d = &toInitiator, ToInitiator
			}
			k := min(n, len(*b))
			tr.Feed(flow, d, (*b)[:k], t0.Add(time.Duration(i)))
			*b = (*b)[k:]
		}
		c := tr.tab.Flows[flow]
		if c == nil {
			return
		}
		for _, s := range c.State.s {
			if cap(s.Buf) > bufCap || s.Skip < 0 {
				t.Fatalf("stream state unbounded: cap %d skip %d", cap(s.Buf), s.Skip)
			}
		}
		if c.Outstanding() > 64 {
			t.Fatalf("%d outstanding", c.Outstanding())
		}
		_ = tr.Connections()
	})
}
