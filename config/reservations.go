package config

import (
	"fmt"
	"net/netip"
	"time"
)

// Reservation is one consumer's RAD reservation (seed 003: Resource
// Allocation = rate per period; dispatching = the throttle): Bytes or IOs
// of its traffic (reads + writes) in every Period.
type Reservation struct {
	// Consumer is the reserved consumer's IP address.
	Consumer string `yaml:"consumer"`
	// Bytes is the amount promised per period, reads and writes together;
	// give it or ios, not both.
	Bytes float64 `yaml:"bytes"`
	// IOs is the number of I/Os promised per period, instead of bytes.
	IOs float64 `yaml:"ios"`
	// Period is the reservation's period (500ms..1m).
	Period time.Duration `yaml:"period"`
}

// Reservation periods: shorter than a few sampling intervals cannot be
// measured; longer than a minute is not a reservation anyone can wait for.
const (
	MinReservationPeriod = 500 * time.Millisecond
	MaxReservationPeriod = time.Minute
	// reservationWarnShare is the share of the stated capacity above which
	// the reservations leave too little for the others and for bursts.
	reservationWarnShare = 0.8
)

// validateReservations checks resource i's reservations as a whole: each
// one's fields, no consumer twice, no reservation on a consumer the config
// also lists as throttleable, and their sum against capacity_mb_s (above
// it: error, the reservations cannot all be met; above 80 %: warning).
func (c *Config) validateReservations(p *problems, i int) {
	bad := p.bad
	r := &c.Resources[i]
	if r.Policy != "reservations" {
		if len(r.Reservations) > 0 {
			bad("reservations apply to policy reservations only", "resources", i, "reservations")
		}
		if r.NetThreshold != 0 {
			bad("net_threshold applies to policy reservations only", "resources", i, "net_threshold")
		}
		if r.CapacityMBs != 0 {
			bad("capacity_mb_s applies to policy reservations only", "resources", i, "capacity_mb_s")
		}
		return
	}
	if len(r.Reservations) == 0 {
		bad("policy reservations needs at least one reservation", "resources", i, "policy")
	}
	if r.NetThreshold < 100*time.Microsecond || r.NetThreshold > time.Second {
		bad("want 100us..1s of queueing delay (srtt − min_rtt)", "resources", i, "net_threshold")
	}
	if r.CapacityMBs < 0 || r.CapacityMBs > 1e6 {
		bad("want 0 (unknown) .. 1e6", "resources", i, "capacity_mb_s")
	}
	throttleable := map[netip.Addr]bool{}
	for _, s := range r.Throttleable {
		if a, err := netip.ParseAddr(s); err == nil {
			throttleable[a.Unmap()] = true
		}
	}
	seen := map[netip.Addr]bool{}
	var sumMBs float64
	for k, res := range r.Reservations {
		a, err := netip.ParseAddr(res.Consumer)
		switch {
		case err != nil:
			bad("not an IP address", "resources", i, "reservations", k, "consumer")
		case seen[a.Unmap()]:
			bad("has a reservation already", "resources", i, "reservations", k, "consumer")
		case throttleable[a.Unmap()]:
			bad("listed throttleable: a reserved consumer is protected", "resources", i, "reservations", k, "consumer")
		}
		if err == nil {
			seen[a.Unmap()] = true
		}
		if (res.Bytes > 0) == (res.IOs > 0) || res.Bytes < 0 || res.IOs < 0 {
			bad("want exactly one of bytes or ios, > 0", "resources", i, "reservations", k)
		}
		if res.Bytes > 1e12 || res.IOs > 1e9 {
			bad("rate beyond any device (bytes ≤ 1e12, ios ≤ 1e9 per period)", "resources", i, "reservations", k)
		}
		if res.Period < MinReservationPeriod || res.Period > MaxReservationPeriod {
			bad(fmt.Sprintf("want %v..%v", MinReservationPeriod, MaxReservationPeriod), "resources", i, "reservations", k, "period")
		} else if res.Bytes > 0 {
			sumMBs += res.Bytes / res.Period.Seconds() / 1e6
		}
	}
	if r.CapacityMBs > 0 {
		switch {
		case sumMBs > r.CapacityMBs:
			bad(fmt.Sprintf("byte reservations sum to %.3g MB/s, more than capacity_mb_s %.3g: they cannot all be met", sumMBs, r.CapacityMBs), "resources", i, "reservations")
		case sumMBs > reservationWarnShare*r.CapacityMBs:
			p.warn(p.at(fmt.Sprintf("byte reservations sum to %.3g MB/s, over %.0f%% of capacity_mb_s %.3g: little is left for the others", sumMBs, 100*reservationWarnShare, r.CapacityMBs),
				nil, "resources", i, "reservations"))
		}
	}
}

// DefaultNetThreshold is the queueing delay (srtt − min_rtt of the
// unthrottled flows) above which the reservations policy calls the network
// congested: a LAN's empty-queue RTT is tens of µs, so 2 ms is a standing
// queue of ~2.5 MB at 10 Gb/s, or 250 KB at 1 Gb/s.
const DefaultNetThreshold = 2 * time.Millisecond
