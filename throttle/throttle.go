// Package throttle slows chosen storage consumers down on the target's (or a
// bridge's) network interface: per-consumer packet delay in each direction,
// or a rate cap. It owns every kernel object it creates (iptables rules,
// ipsets, qdiscs, nfnetlink queues) and removes them on Close.
//
// It must not decide *who* to throttle or *how much*: that is control's and
// agent's job. It must never drop accepted storage traffic: backends fail
// open (NFQUEUE --queue-bypass, watchdogs) so a dead sanqos means no throttle.
//
// Imports (sanqos): nfqueue.
package throttle

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// MaxDelay is the exclusive upper bound of any delay we apply. Linux's
// TCP_RTO_MIN is 200 ms; a delay approaching it would trigger spurious
// retransmission timeouts and slow start, which is the packet loss this
// method exists to avoid.
const MaxDelay = 100 * time.Millisecond

// MaxRate bounds a rate cap (bytes/s); anything above 100 Gbit/s is a typo.
const MaxRate = 100e9 / 8

// Setting is what a consumer is subjected to. Zero values mean "not
// throttled" in that dimension.
type Setting struct {
	// ReadDelay is added to segments carrying payload towards the consumer
	// (read data, iSCSI responses): it slows the consumer's reads.
	ReadDelay time.Duration `json:"read_delay_ns"`
	// WriteDelay slows the consumer's writes. Which packets carry it is
	// the backend's WriteOn: the target's replies (R2Ts and SCSI status,
	// so each write command completes later) or, as in the thesis, its
	// pure ACKs (the consumer's TCP send window opens later).
	WriteDelay time.Duration `json:"write_delay_ns"`
	// Rate caps bytes/s sent towards the consumer (0 = uncapped).
	Rate uint64 `json:"rate_bytes_per_s"`
	// WriteRate caps bytes/s received from the consumer: its writes
	// (0 = uncapped).
	WriteRate uint64 `json:"write_rate_bytes_per_s,omitempty"`
}

// WriteOn says which packets towards a consumer carry its write delay.
//
// Why replies are the default: a delayed pure ACK holds back the
// acknowledgement of the consumer's own data, and a Linux sender whose
// data is unacknowledged for 2·srtt + 2 ms sends a tail-loss probe. After
// any quiet spell a writer's srtt is the bare network RTT (tens of µs
// here), so the first delayed ACKs of every load step drew spurious
// probes (lab, autonomic: ~140 per run, every one a retransmission on the
// wire). Holding the target's replies instead leaves every ACK of the
// consumer's data on time; what waits is the target's own segment, which
// its TCP does not retransmit while it is held (tcp_write_xmit sees the
// clone still queued in the host: skb_still_in_host_queue), and which is
// alone in flight for an iSCSI writer (PTO 2·srtt + 200 ms when one
// segment is out). The write still completes the delay later.
type WriteOn uint8

const (
	// WriteOnReplies puts the write delay on the target's segments that
	// carry payload (R2T, SCSI status, NOP-In); pure ACKs pass at once.
	WriteOnReplies WriteOn = iota
	// WriteOnACKs puts it on the target's pure ACKs (thesis 4.3.2).
	WriteOnACKs
)

func (w WriteOn) String() string {
	if w == WriteOnACKs {
		return "acks"
	}
	return "replies"
}

// ParseWriteOn reads "replies" or "acks" ("" is replies).
func ParseWriteOn(s string) (WriteOn, error) {
	switch s {
	case "", "replies":
		return WriteOnReplies, nil
	case "acks":
		return WriteOnACKs, nil
	}
	return 0, fmt.Errorf("write_delay_on %q: want replies or acks", s)
}

// IsZero reports whether s throttles nothing.
func (s Setting) IsZero() bool { return s == Setting{} }

// Validate refuses settings that could hurt TCP or make no sense.
func (s Setting) Validate() error {
	if err := validateDelay(s.ReadDelay); err != nil {
		return fmt.Errorf("read %w", err)
	}
	if err := validateDelay(s.WriteDelay); err != nil {
		return fmt.Errorf("write %w", err)
	}
	if s.Rate > MaxRate {
		return fmt.Errorf("rate %d B/s is above the %d B/s limit", s.Rate, uint64(MaxRate))
	}
	if s.WriteRate > MaxRate {
		return fmt.Errorf("write rate %d B/s is above the %d B/s limit", s.WriteRate, uint64(MaxRate))
	}
	return nil
}

func validateDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("delay %v is negative", d)
	}
	if d >= MaxDelay {
		return fmt.Errorf("delay %v is not below %v (it would approach TCP's 200 ms minimum RTO and cause retransmissions)", d, MaxDelay)
	}
	return nil
}

// ErrUnsupported is returned (wrapped) when a backend cannot apply a kind of
// setting, e.g. a rate cap on the delay line.
var ErrUnsupported = errors.New("not supported by this backend")

// Throttle is the seam between the controller and the kernel. Each call is
// all-or-nothing: on error no consumer's state has changed, with one
// exception: a *RefusedError names the consumers a backend cannot
// throttle as asked (IPv6 where its kernel side reads IPv4 only), and
// every other consumer of the batch was applied. Implementations
// apply a batch of consumers with one kernel call per kind of object (one
// ipset swap, one qdisc change), never one per member where avoidable.
type Throttle interface {
	// Name is the backend name as used in config and logs
	// ("delayline", "netem", "htb").
	Name() string
	// Set replaces the settings of the given consumers. A zero Setting
	// clears that consumer.
	Set(settings map[netip.Addr]Setting) error
	// List returns the consumers currently throttled and their settings.
	List() map[netip.Addr]Setting
	// Close removes every kernel object the backend created (after letting
	// held packets go), and leaves traffic unthrottled.
	Close() error
}

// Clear removes the given consumers' throttles from t; with no consumers
// it clears every one t lists. It is a Set of zero settings, so every
// backend clears the way it sets: all or nothing.
func Clear(t Throttle, consumers ...netip.Addr) error {
	if len(consumers) == 0 {
		for a := range t.List() {
			consumers = append(consumers, a)
		}
	}
	m := make(map[netip.Addr]Setting, len(consumers))
	for _, a := range consumers {
		m[a] = Setting{}
	}
	return t.Set(m)
}

// validateFor checks a batch (ValidateAll) for a backend that applies
// what caps says, and refuses a setting it does not apply.
func validateFor(backend string, caps Caps, settings map[netip.Addr]Setting) error {
	if err := ValidateAll(settings); err != nil {
		return err
	}
	for a, s := range settings {
		var what string
		switch {
		case !caps.Delay && (s.ReadDelay != 0 || s.WriteDelay != 0):
			what = "delay"
		case !caps.Rate && s.Rate != 0:
			what = "rate cap"
		case !caps.WriteRate && s.WriteRate != 0:
			what = "write cap"
		default:
			continue
		}
		return fmt.Errorf("%s: consumer %v: %s: %w", backend, a, what, ErrUnsupported)
	}
	return nil
}

// listed is a backend's List: each consumer's setting as it holds it
// (cur, read under mu), a copy the caller owns.
func listed[V any](mu *sync.Mutex, cur map[netip.Addr]V, setting func(V) Setting) map[netip.Addr]Setting {
	mu.Lock()
	defer mu.Unlock()
	out := make(map[netip.Addr]Setting, len(cur))
	for a, v := range cur {
		out[a] = setting(v)
	}
	return out
}

// ValidateAll checks a whole batch before anything is applied.
func ValidateAll(settings map[netip.Addr]Setting) error {
	for a, s := range settings {
		if !a.IsValid() {
			return errors.New("invalid consumer address")
		}
		if err := s.Validate(); err != nil {
			return fmt.Errorf("consumer %v: %w", a, err)
		}
	}
	return nil
}
