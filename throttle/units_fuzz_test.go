package throttle

import (
	"net/netip"
	"testing"
)

// Delays and rates typed by an operator: any string gives an error or a
// value inside the limits, never a panic.
func FuzzParseDelay(f *testing.F) {
	for _, s := range []string{"4.6ms", "0", "99.9ms", "100ms", "-1ms", "1e300s", "0.1µs", "5", "NaNms", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDelay(s)
		if err == nil && (d < 0 || d >= MaxDelay) {
			t.Fatalf("ParseDelay(%q) = %v, outside [0, %v)", s, d, MaxDelay)
		}
	})
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10MiB/s", "1Gbit/s", "0", "12.5MB/s", "-1MB/s", "1e30B/s", "inf", "5kbit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err == nil && r > MaxRate {
			t.Fatalf("ParseRate(%q) = %d above the limit", s, r)
		}
	})
}

// The delay line classifies every packet it is handed: arbitrary bytes
// must not panic it. A pure ACK needs an IPv4 header and the TCP bytes up
// to the flags (34 bytes); lengths come from the headers, not from how
// much of the packet the queue copied to us.
func FuzzClassifyPacket(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 99, 0, 1, 10, 99, 0, 3,
		0x0c, 0xbc, 0x9c, 0x40, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{0x60})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		dst, _, kind := classifyPacket(b)
		if kind == kindAck && len(b) < 34 {
			t.Fatalf("%d bytes classified as a pure ACK", len(b))
		}
		if kind != kindUnknown && dst == (netip.Addr{}) {
			t.Fatalf("classified %v without a destination", kind)
		}
	})
}
