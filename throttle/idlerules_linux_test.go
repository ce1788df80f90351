package throttle

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkIdleRules measures what the rules of an idle delay line (no
// consumer throttled: its NFQUEUE rule and empty ipset stay in OUTPUT)
// cost each packet the target sends: thesis §5.8's question asked of the
// kernel directly, because a throughput comparison in the lab cannot
// resolve a fraction of a percent on this VM (overhead-interleaved).
//
// A raw socket in the target namespace sends bare TCP segments from port
// 3260 (so the rule's tcp and set matches run) to a neighbour with a
// static MAC that the peer drops on sight, so only the sender's path
// differs between the two sides. Blocks alternate rules in/out, in an
// order swapped every iteration, so drift falls on both alike.
// packet-ns-none and packet-ns-idle-rules are the two means, rule-ns
// their difference: times the target's packets/s under load
// (overhead-interleaved's target_tx_packets_per_s) it is the share of a
// core the idle rules take.
func BenchmarkIdleRules(b *testing.B) {
	l := newLab(b)
	// Nobody answers ARP for it; the permanent entry sends without asking.
	sink := netip.MustParseAddr("10.231.0.99")
	l.t.Do(func() {
		sh(b, "sh", "-c", "ip neigh replace "+sink.String()+" lladdr 02:00:00:00:00:99 nud permanent dev $(ip -o -4 addr show to 10.231.0.0/24 | awk '{print $2}')")
	})
	var fd int
	var err error
	l.t.Do(func() { fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW) })
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	pkt := make([]byte, 40)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_TCP // IPv4, TTL, TCP; length and checksum: the kernel's
	copy(pkt[12:16], l.tAddr.AsSlice())
	copy(pkt[16:20], sink.AsSlice())
	tcp := pkt[20:]
	tcp[0], tcp[1] = 3260>>8, 3260&0xff // source port: the iSCSI port the rule matches
	tcp[2], tcp[3] = 40000>>8, 40000&0xff
	tcp[12], tcp[13] = 5<<4, 0x10 // header length, ACK
	to := &unix.SockaddrInet4{Addr: sink.As4()}

	// The filter table comes into a namespace with its first rule and
	// stays: create it before timing, so both sides traverse it and only
	// the rule differs.
	l.t.Do(func() {
		var d *DelayLine
		if d, err = NewDelayLine(DelayLineConfig{Queue: 7, Label: "sqt-idle"}); err == nil {
			err = d.Close()
		}
	})
	if err != nil {
		b.Fatal(err)
	}

	const block = 50000
	var spent [2]time.Duration
	var sent [2]int
	for i := 0; i < b.N; i++ {
		for k := 0; k < 2; k++ {
			on := (i + k) % 2
			var d *DelayLine
			if on == 1 {
				l.t.Do(func() { d, err = NewDelayLine(DelayLineConfig{Queue: 7, Label: "sqt-idle"}) })
				if err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			for range block {
				if err := unix.Sendto(fd, pkt, 0, to); err != nil {
					b.Fatal(err)
				}
			}
			spent[on] += time.Since(start)
			sent[on] += block
			if d != nil {
				l.t.Do(func() { err = d.Close() })
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	none := float64(spent[0].Nanoseconds()) / float64(sent[0])
	rules := float64(spent[1].Nanoseconds()) / float64(sent[1])
	b.ReportMetric(none, "packet-ns-none")
	b.ReportMetric(rules, "packet-ns-idle-rules")
	b.ReportMetric(rules-none, "rule-ns")
}
