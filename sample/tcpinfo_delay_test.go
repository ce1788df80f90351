package sample

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// Per-peer delay signals from TCP_INFO, with values captured on the lab's
// target (ss -tin, net-bound load of `lab run reservations`: three
// connections of one writer behind a 24 Mbit/s link).
func TestTCPRatesDelaySignals(t *testing.T) {
	conn := func(cookie uint32, port uint16, rttUs, varUs, minUs uint32, deliv uint64, unacked uint32, recv uint64) *netlink.InetDiagTCPInfoResp {
		r := resp(cookie, "10.99.0.3:"+itoa(port), 3260, recv, 0)
		r.TCPInfo.Rtt, r.TCPInfo.Rttvar, r.TCPInfo.Min_rtt = rttUs, varUs, minUs
		r.TCPInfo.Delivery_rate, r.TCPInfo.Unacked, r.TCPInfo.Snd_mss = deliv, unacked, 1448
		return r
	}
	rounds := [][]*netlink.InetDiagTCPInfoResp{
		{conn(1, 36956, 40000, 9000, 10, 0, 0, 0), conn(2, 36944, 40000, 2000, 13, 0, 0, 0), conn(3, 36928, 30000, 4000, 15, 0, 0, 0),
			conn(4, 1, 5000, 100, 0, 0, 0, 0)},
		{conn(1, 36956, 47720, 10867, 10, 1158400000, 1, 3230672), conn(2, 36944, 43237, 2925, 13, 891076920, 1, 3230672),
			conn(3, 36928, 38717, 4504, 15, 772266664, 0, 3230672),
			// No RTT sample yet (min_rtt ~0u): counts for rates, not delay.
			conn(4, 1, 90000, 100, ^uint32(0), 0, 0, 0)},
	}
	i := 0
	now := time.Unix(0, 0)
	tr := &TCPRates{Ports: []uint16{3260}, now: func() time.Time { return now }, dump: dumpOf(func(f uint8) ([]*netlink.InetDiagTCPInfoResp, error) {
		if f != 2 {
			return nil, nil
		}
		return rounds[i], nil
	})}
	tr.Sample()
	i, now = 1, now.Add(time.Second)
	r, err := tr.Sample()
	if err != nil {
		t.Fatal(err)
	}
	got := r[mustAddr("10.99.0.3")]
	want := Rate{WriteBps: 3 * 3230672, WriteBytes: 3 * 3230672, Conns: 4, SRTT: 90 * time.Millisecond, QueueDelay: 47710 * time.Microsecond,
		MinRTT: 10 * time.Microsecond, RTTVar: 10867 * time.Microsecond, DeliveryBps: 1158400000 + 891076920 + 772266664, InFlight: 2 * 1448, Seconds: 1}
	if got != want {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
