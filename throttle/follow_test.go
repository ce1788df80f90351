package throttle

import (
	"testing"
	"time"
)

func TestFollower(t *testing.T) {
	const ms = int64(time.Millisecond)
	slack := int64(followSlack)
	type pkt struct {
		at, target int64 // arrival and setting, ns
		pure       bool
		ack        uint32
		want       int64 // delay the packet gets
	}
	cases := []struct {
		name  string
		syn   int64 // > 0: the flow starts with a SYN-ACK held this long at 0
		srtt0 int64
		pkts  []pkt
	}{
		{name: "an unknown flow starts at the slack",
			pkts: []pkt{{0, 20 * ms, true, 1, slack}}},
		{name: "below the cap the setting applies at once",
			srtt0: 10 * ms,
			pkts:  []pkt{{0, 12 * ms, true, 1, 12 * ms}}},
		{name: "samples count only once released",
			// Both ACKs arrive before the first leaves: the second
			// gets the same cap, since the sender has seen nothing.
			pkts: []pkt{{0, 20 * ms, true, 1, slack}, {slack / 2, 20 * ms, true, 2, slack}}},
		{name: "a released ACK of new data moves srtt by 1/8",
			pkts: []pkt{{0, 20 * ms, true, 1, slack}, {2 * ms, 20 * ms, true, 2, 2*(slack/8) + slack}}},
		{name: "a duplicate ACK is no sample",
			pkts: []pkt{{0, 20 * ms, true, 1, slack}, {2 * ms, 20 * ms, true, 1, 2*(slack/8) + slack}, {4 * ms, 20 * ms, true, 1, 2*(slack/8) + slack}}},
		{name: "data moves srtt by 1/16 (one ACK per two segments)",
			pkts: []pkt{{0, 20 * ms, false, 0, slack}, {2 * ms, 20 * ms, false, 0, 2*(slack/16) + slack}}},
		{name: "a SYN-ACK's delay is the first sample",
			syn:  8 * ms,
			pkts: []pkt{{10 * ms, 20 * ms, true, 1, 17 * ms}}},
		{name: "falls apply at once and count at 1/4",
			srtt0: 16 * ms,
			pkts:  []pkt{{0, 0, true, 1, 0}, {1, 40 * ms, true, 1, 2*12*ms + slack}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := follower{srtt: c.srtt0}
			if c.syn > 0 {
				f.start(0, c.syn)
			}
			for i, p := range c.pkts {
				d := min(p.target, f.cap(p.at))
				if d != p.want {
					t.Fatalf("packet %d: delay %v, want %v", i, time.Duration(d), time.Duration(p.want))
				}
				f.sent(p.at, p.at+d, p.pure, p.ack)
			}
		})
	}
}

// TestFollowerRise: a window-limited writer's ACKs, a window per round
// trip, reach a 40 ms setting within a few round trips while no ACK is
// held longer than 2·srtt + 2 ms of the sender's own EWMA.
func TestFollowerRise(t *testing.T) {
	const ms = int64(time.Millisecond)
	const window = 16 // ACKs per round trip
	var f follower
	var sender int64 // the sender's srtt, updated as ACKs leave
	t0, ack := int64(0), uint32(0)
	rtts := 0
	for ; rtts < 20; rtts++ {
		var rtt int64
		for i := range window {
			at := t0 + int64(i)*10_000
			ack++
			d := min(40*ms, f.cap(at))
			if d > 2*sender+2*ms {
				t.Fatalf("round trip %d: ACK held %v, the sender's probe fires at %v", rtts, time.Duration(d), time.Duration(2*sender+2*ms))
			}
			f.sent(at, at+d, true, ack)
			rtt = max(rtt, d)
		}
		for range window {
			sender += (rtt - sender) >> 3 // ACKs of one window leave together
		}
		t0 += rtt + ms
		if rtt == 40*ms {
			break
		}
	}
	if rtts > 8 {
		t.Errorf("took %d round trips to reach 40 ms, want ≤ 8", rtts)
	}
}
