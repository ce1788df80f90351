// Package cost estimates how much of a shared resource's time each
// consumer's I/O takes, per direction, from the counters the agent
// already samples (requests and bytes per interval, per direction). It
// answers "who saturates the resource, in which direction" in one unit
// (seconds of the resource's service per second: 1.0 keeps one disk
// queue busy) however the I/O is shaped: a 64 KiB sequential read and an
// 8 KiB random read move different bytes but cost about the same here.
//
// The estimate is a disk model, service = overhead + positioning +
// bytes/bandwidth × (write ? write cost : 1), as in the lab's modelled
// group (lab/diskmodel) and blk-iocost's linear model. Counters cannot
// say whether a request was sequential (diskstats has no offsets), so the
// positioning time is charged by request size: fully below RandomBytes,
// not at all from SequentialBytes up, linearly between. Small I/O is
// mostly random and large I/O mostly streaming; a 64 KiB random read is
// the case this gets wrong (charged as sequential, about a quarter of its
// cost on the thesis' group). The package does no I/O and keeps no state.
//
// Imports (sanqos): none.
package cost

import "time"

// Model is a resource's service-time model.
type Model struct {
	Seek      time.Duration // positioning time of a random request
	Overhead  time.Duration // fixed per request
	Bandwidth float64       // bytes/s of transfer
	WriteCost float64       // transfer-time multiplier of writes (≥ 1)
	// Requests smaller than RandomBytes are charged a full seek, from
	// SequentialBytes up none.
	RandomBytes, SequentialBytes float64
}

// Default is the thesis' disk group as one queue (the lab's default
// modelled resource): a random 8 KiB read ~5.4 ms, a sequential 64 KiB
// read ~1.8 ms, a sequential 64 KiB write ~3.5 ms.
func Default() Model {
	return Model{Seek: 5 * time.Millisecond, Overhead: 200 * time.Microsecond, Bandwidth: 40e6, WriteCost: 2,
		RandomBytes: 16 << 10, SequentialBytes: 64 << 10}
}

// Request is the estimated service time of one request of size bytes. A
// model without a bandwidth (the zero Model) charges no transfer time.
func (m Model) Request(write bool, bytes float64) time.Duration {
	var xfer float64
	if m.Bandwidth > 0 {
		xfer = bytes / m.Bandwidth
	}
	if write && m.WriteCost > 1 {
		xfer *= m.WriteCost
	}
	return m.Overhead + time.Duration(m.randomness(bytes)*float64(m.Seek)) + time.Duration(xfer*float64(time.Second))
}

// randomness is the share of a seek a request of this size is charged.
func (m Model) randomness(bytes float64) float64 {
	switch {
	case bytes < m.RandomBytes:
		return 1
	case bytes >= m.SequentialBytes || m.SequentialBytes <= m.RandomBytes:
		return 0
	}
	return (m.SequentialBytes - bytes) / (m.SequentialBytes - m.RandomBytes)
}

// Rate is the resource time per second that ops requests per second
// moving bps bytes per second in one direction take: their mean size is
// what the model charges.
func (m Model) Rate(write bool, ops, bps float64) float64 {
	if ops <= 0 {
		return 0
	}
	return ops * m.Request(write, bps/ops).Seconds()
}

// Load is one consumer's estimated cost per direction, in resource
// seconds per second.
type Load struct{ Read, Write float64 }

// Total is both directions.
func (l Load) Total() float64 { return l.Read + l.Write }

// ReadFraction is the share of the cost in reads (0 without any).
func (l Load) ReadFraction() float64 {
	if t := l.Total(); t > 0 {
		return l.Read / t
	}
	return 0
}

// Of estimates a consumer's load from its per-direction request and
// byte rates.
func (m Model) Of(readOps, readBps, writeOps, writeBps float64) Load {
	return Load{Read: m.Rate(false, readOps, readBps), Write: m.Rate(true, writeOps, writeBps)}
}

// Bytes prices transfers alone, for a consumer whose requests cannot be
// counted (only its bytes on the wire are its own): the transfer part of
// the model, which is what a bulk consumer's cost mostly is; its
// direction's share is what it is used for.
func (m Model) Bytes(readBps, writeBps float64) Load {
	if m.Bandwidth <= 0 {
		return Load{}
	}
	return Load{Read: readBps / m.Bandwidth, Write: writeBps / m.Bandwidth * max(1, m.WriteCost)}
}

// Split gives a consumer's delay to the directions it loads the resource
// in: the direction that costs most gets d, the other d × 4 × its cost
// over the larger one's, at most d. A real mix (the lesser direction a
// fifth of the cost or more) is slowed by d both ways: each stream of a
// VM or a database waits for its reads and its writes in turn, and the
// static-delay oracle needs both to hold the reader (simulator, mixed:
// the lesser direction at half the delay let twice the oracle's writes
// through). A direction that is a sliver of the cost (a backup's log
// writes) gets a sliver of the delay: slowing it would cost the consumer
// latency and relieve the resource of nothing.
func (l Load) Split(d time.Duration) (read, write time.Duration) {
	hi := max(l.Read, l.Write)
	if hi <= 0 || d <= 0 {
		return 0, 0
	}
	part := func(x float64) time.Duration { return time.Duration(float64(d) * min(1, 4*x/hi)) }
	return part(l.Read), part(l.Write)
}
