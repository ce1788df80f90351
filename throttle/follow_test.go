package throttle

import (
	"testing"
	"time"
)

func TestFollow(t *testing.T) {
	const ms = int64(time.Millisecond)
	slack := int64(followSlack)
	type pkt struct {
		kind       pktKind
		at, target int64 // arrival and setting, ns
		ack        uint32
		want       int64 // delay the packet gets
	}
	ack, data := kindAck, kindData
	cases := []struct {
		name string
		pkts []pkt
	}{
		{"an unknown flow starts at the slack",
			[]pkt{{ack, 0, 20 * ms, 1, slack}}},
		{"below the cap the setting applies at once",
			[]pkt{{kindSynAck, 0, 10 * ms, 1, 10 * ms}, {ack, 11 * ms, 12 * ms, 2, 12 * ms}}},
		{"samples count only once released",
			// Both ACKs arrive before the first leaves: the second
			// gets the same cap, since the sender has seen nothing.
			[]pkt{{ack, 0, 20 * ms, 1, slack}, {ack, slack / 2, 20 * ms, 2, slack}}},
		{"a released ACK of new data moves the consumer's srtt by 1/8",
			[]pkt{{ack, 0, 20 * ms, 1, slack}, {ack, 2 * ms, 20 * ms, 2, 2*(slack/8) + slack}}},
		{"a duplicate ACK is no sample",
			[]pkt{{ack, 0, 20 * ms, 1, slack}, {ack, 2 * ms, 20 * ms, 1, 2*(slack/8) + slack}, {ack, 4 * ms, 20 * ms, 1, 2*(slack/8) + slack}}},
		{"payload acknowledging new data is a sample of the consumer's srtt",
			[]pkt{{data, 0, 0, 1, 0}, {ack, 0, 20 * ms, 2, slack}, {data, 2 * ms, 20 * ms, 3, slack}, {ack, 2*ms + slack + 1, 20 * ms, 4, 2*((slack/8)+(slack-slack/8)/8) + slack}}},
		{"payload moves our srtt by 1/16 (one ACK per two segments)",
			[]pkt{{data, 0, 20 * ms, 1, slack}, {data, 2 * ms, 20 * ms, 1, 2*(slack/16) + slack}}},
		{"payload acknowledging new data takes the lower cap",
			[]pkt{{kindSynAck, 0, 8 * ms, 1, 8 * ms}, {data, 9 * ms, 40 * ms, 1, 17 * ms}, {data, 9 * ms, 40 * ms, 2, 17 * ms}}},
		{"a SYN-ACK's delay is the first sample",
			[]pkt{{kindSynAck, 0, 8 * ms, 1, 8 * ms}, {ack, 10 * ms, 20 * ms, 2, 17 * ms}}},
		{"falls apply at once and count at 1/4",
			[]pkt{{kindSynAck, 0, 16 * ms, 1, 16 * ms}, {ack, 16 * ms, 0, 2, 0}, {ack, 16*ms + 1, 40 * ms, 2, 2*12*ms + slack}}},
		{"a fall that acknowledges nothing new is no sample",
			[]pkt{{kindSynAck, 0, 16 * ms, 1, 16 * ms}, {data, 16 * ms, 0, 1, 0}, {ack, 16*ms + 1, 40 * ms, 1, 2*16*ms + slack}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f follow
			for i, p := range c.pkts {
				d := int64(f.limit(p.kind, time.Duration(p.target), p.at, p.ack))
				if d != p.want {
					t.Fatalf("packet %d: delay %v, want %v", i, time.Duration(d), time.Duration(p.want))
				}
				f.held(p.kind, p.at, p.at+d, p.ack)
			}
		})
	}
}

// TestFollowRise: a window-limited writer's ACKs, a window per round
// trip, reach a 40 ms setting within a few round trips while no ACK is
// held longer than 2·srtt + 2 ms of the sender's own EWMA.
func TestFollowRise(t *testing.T) {
	const ms = int64(time.Millisecond)
	const window = 16 // ACKs per round trip
	var f follow
	var sender int64 // the sender's srtt, updated as ACKs leave
	t0, ack := int64(0), uint32(0)
	rtts := 0
	for ; rtts < 20; rtts++ {
		var rtt int64
		for i := range window {
			at := t0 + int64(i)*10_000
			ack++
			d := int64(f.limit(kindAck, 40*time.Millisecond, at, ack))
			if d > 2*sender+2*ms {
				t.Fatalf("round trip %d: ACK held %v, the sender's probe fires at %v", rtts, time.Duration(d), time.Duration(2*sender+2*ms))
			}
			f.held(kindAck, at, at+d, ack)
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
