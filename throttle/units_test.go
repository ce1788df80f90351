package throttle

import (
	"net/netip"
	"testing"
	"time"
)

func TestParseDelay(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"4.6ms", 4600 * time.Microsecond, true},
		{"500us", 500 * time.Microsecond, true},
		{"0", 0, true},
		{"99.9ms", 99900 * time.Microsecond, true},
		{"100ms", 0, false}, // reaches toward TCP's RTO
		{"1s", 0, false},
		{"-1ms", 0, false},
		{"4.6", 0, false}, // unit required
		{"4.6 parsecs", 0, false},
	} {
		got, err := ParseDelay(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDelay(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"10MiB/s", 10 << 20, true},
		{"80Mbit/s", 10e6, true},
		{"500kB/s", 500e3, true},
		{"1.5GB/s", 1.5e9, true},
		{"10MiB", 0, false},
		{"10furlongs/s", 0, false},
		{"-5MB/s", 0, false},
		{"0MB/s", 0, false},
		{"MB/s", 0, false},
		{"200Gbit/s", 0, false},
	} {
		got, err := ParseRate(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestMemoryAllOrNothing(t *testing.T) {
	m := NewMemory()
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::2")
	if err := m.Set(map[netip.Addr]Setting{a: {WriteDelay: time.Millisecond}, b: {ReadDelay: time.Second}}); err == nil {
		t.Fatal("accepted a 1 s delay")
	}
	if len(m.List()) != 0 {
		t.Fatal("a rejected batch changed state")
	}
	if err := m.Set(map[netip.Addr]Setting{a: {WriteDelay: time.Millisecond}, b: {Rate: 1000}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(map[netip.Addr]Setting{a: {}}); err != nil || len(m.List()) != 1 {
		t.Fatalf("zero setting should clear: %v %v", err, m.List())
	}
	Clear(m)
	if len(m.List()) != 0 {
		t.Fatal("clear all")
	}
}
