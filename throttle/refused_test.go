package throttle

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Every address a consumer can be given as has at most one key in the
// BPF maps, of its family, and none panics: IPv4 as the host-order number
// the programs' LD_ABS loads, IPv6 as its 16 bytes on the wire; an
// IPv4-mapped address is IPv4; a zone does not change the key; an
// invalid address has none.
func TestBPFKeys(t *testing.T) {
	v6 := [16]byte{0xfd, 0x00, 0x02, 0x01, 15: 0x02}
	ll := [16]byte{0xfe, 0x80, 15: 0x01}
	for _, tc := range []struct {
		name   string
		a      netip.Addr
		k4     uint32
		ok4    bool
		k6     [16]byte
		ok6    bool
		family string
	}{
		{"IPv4", netip.MustParseAddr("10.201.0.2"), 0x0ac90002, true, [16]byte{}, false, "4"},
		{"IPv4-mapped IPv6", netip.MustParseAddr("::ffff:10.201.0.2"), 0x0ac90002, true, [16]byte{}, false, "4"},
		{"IPv6", netip.MustParseAddr("fd00:201::2"), 0, false, v6, true, "6"},
		{"link-local with zone", netip.MustParseAddr("fe80::1%eth0"), 0, false, ll, true, "6"},
		{"invalid", netip.Addr{}, 0, false, [16]byte{}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k4, ok4 := ipv4Key(tc.a)
			k6, ok6 := ipv6Key(tc.a)
			if k4 != tc.k4 || ok4 != tc.ok4 {
				t.Errorf("ipv4Key = %#x, %v; want %#x, %v", k4, ok4, tc.k4, tc.ok4)
			}
			if k6 != tc.k6 || ok6 != tc.ok6 {
				t.Errorf("ipv6Key = %x, %v; want %x, %v", k6, ok6, tc.k6, tc.ok6)
			}
		})
	}
}

// edt's batch by family: with the IPv6 part every consumer goes ahead,
// keyed as the kernel sees it (unmapped, no zone); without it the IPv4
// ones do and the IPv6 ones with a delay are named, while clearing an
// IPv6 consumer is never refused (there is nothing of it to remove).
func TestEDTSplit(t *testing.T) {
	ms := func(n int) Setting { return Setting{ReadDelay: time.Duration(n) * time.Millisecond} }
	v4a, v4b := netip.MustParseAddr("10.201.0.2"), netip.MustParseAddr("10.201.0.3")
	mapped := netip.MustParseAddr("::ffff:10.201.0.4")
	v6, v6gone := netip.MustParseAddr("fd00:201::2"), netip.MustParseAddr("fd00:201::3")
	zoned := netip.MustParseAddr("fe80::1%eth0")
	batch := map[netip.Addr]Setting{v4a: ms(10), v4b: {}, mapped: ms(4), v6: ms(20), v6gone: {}, zoned: ms(3)}
	for _, tc := range []struct {
		name    string
		v6      bool
		apply   map[netip.Addr]Setting
		refused []netip.Addr
	}{
		{"with the IPv6 part", true, map[netip.Addr]Setting{v4a: ms(10), v4b: {}, mapped.Unmap(): ms(4), v6: ms(20), v6gone: {}, zoned.WithZone(""): ms(3)}, nil},
		{"without it", false, map[netip.Addr]Setting{v4a: ms(10), v4b: {}, mapped.Unmap(): ms(4), v6gone: {}}, []netip.Addr{v6, zoned.WithZone("")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, r := edtSplit(batch, tc.v6)
			if len(got) != len(tc.apply) {
				t.Errorf("applies %v, want %v", got, tc.apply)
			}
			for a, s := range tc.apply {
				if g, ok := got[a]; !ok || g != s {
					t.Errorf("%v: applies %+v (%v), want %+v", a, g, ok, s)
				}
			}
			err := r.err()
			if len(tc.refused) == 0 {
				if err != nil {
					t.Errorf("refused %v", err)
				}
				return
			}
			m, ok := Refused(err)
			if !ok || len(m) != len(tc.refused) {
				t.Fatalf("refused %v, want %v", err, tc.refused)
			}
			for _, a := range tc.refused {
				if _, ok := m[a]; !ok || !strings.Contains(err.Error(), a.String()) {
					t.Errorf("%v not named in %q", a, err)
				}
			}
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("%v is not ErrUnsupported", err)
			}
		})
	}
}

// ipv4Only is a Memory that throttles IPv4 consumers only, as netem, htb,
// the write caps and edt without its IPv6 part do.
type ipv4Only struct{ *Memory }

func (m ipv4Only) Set(s map[netip.Addr]Setting) error {
	s, r := only4("v4", s, func(s Setting) bool { return !s.IsZero() }, errIPv6)
	if err := m.Memory.Set(s); err != nil {
		return err
	}
	return r.err()
}

// An IPv6 consumer one half of a layered pair cannot serve is named, and
// the rest of the batch stands in both halves; a hard refusal of the
// caps still restores the delays, of the consumers whose delays were set.
func TestLayeredRefusals(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	delay, rate := ipv4Only{NewMemory()}, &refusing{Memory: NewMemory()}
	l := Layered(delay, rate)
	err := l.Set(map[netip.Addr]Setting{v4: {WriteDelay: 20 * time.Millisecond, WriteRate: 1 << 20}, v6: {ReadDelay: time.Millisecond, WriteRate: 2 << 20}})
	m, ok := Refused(err)
	if _, named := m[v6]; !ok || len(m) != 1 || !named {
		t.Fatalf("Set: %v, want the IPv6 consumer alone named", err)
	}
	if got := l.List()[v4]; got != (Setting{WriteDelay: 20 * time.Millisecond, WriteRate: 1 << 20}) {
		t.Errorf("the IPv4 consumer has %+v", got)
	}
	rate.fail = true
	err = l.Set(map[netip.Addr]Setting{v4: {WriteDelay: 30 * time.Millisecond, WriteRate: 3 << 20}, v6: {ReadDelay: 2 * time.Millisecond}})
	if _, partial := Refused(err); err == nil || partial {
		t.Fatalf("a hard refusal of the caps came back as %v", err)
	}
	if got := delay.List(); got[v4].WriteDelay != 20*time.Millisecond || len(got) != 1 {
		t.Errorf("the delays were not restored: %+v", got)
	}
}

// A RefusedError says which consumers were left out and why, in address
// order, and that the others were applied.
func TestRefusedErrorText(t *testing.T) {
	r := &refusals{backend: "edt"}
	r.add(netip.MustParseAddr("fd00::9"), errIPv6)
	r.add(netip.MustParseAddr("fd00::2"), errIPv6)
	want := "edt: 2 consumer(s) not throttled (the others were applied): fd00::2: IPv6: not supported by this backend; fd00::9: IPv6: not supported by this backend"
	if got := r.err().Error(); got != want {
		t.Errorf("%q\nwant %q", got, want)
	}
	if (&refusals{}).err() != nil {
		t.Error("nothing refused is no error")
	}
}
