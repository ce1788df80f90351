package throttle

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sanqos/sanqos/nfqueue"
	"golang.org/x/sys/unix"
)

// DelayLine is the userspace packet-delay backend. An iptables rule (one per
// family, from a Classifier) sends packets from the storage port to the
// throttled consumers into an NFQUEUE; the delay line holds each one for its
// consumer's delay, counted from when it reached us, then accepts it
// unchanged. Pure ACKs get the write delay (the consumer's send window opens
// later, so its writes slow down), everything else the read delay.
//
// Ordering: each flow's packets (consumer address and port) wait in one
// FIFO and leave from its head, so no packet overtakes an earlier one of
// the same flow; a packet with a short delay behind one with a long delay
// waits for it.
//
// Ramping: with Ramp set, each flow's delay grows toward its consumer's
// setting at a bounded rate (ramp.go); with Follow, each packet's delay is
// capped by a model of its sender's srtt (follow.go). Either way a
// throttled sender's srtt keeps up and it sends no spurious tail-loss
// probes; Follow rises as fast as that allows. Without either, a new
// delay applies at once. A SYN-ACK always gets the larger of the two
// delays: it is the first RTT sample of both ends.
//
// Timing: due times are met by a timerfd (absolute CLOCK_MONOTONIC, no
// timer slack) read by a dedicated goroutine, not by Go timers, whose idle
// wake-ups are rounded to 1 ms by epoll_wait on Linux.
//
// Bounded memory: at most QueueLimit packets are held (the kernel keeps the
// packets, we keep 16 bytes each). A packet arriving at the limit is held
// and the packet due soonest is released at once, ahead of its time, and
// counted in PassedAtLimit: beyond the limit the delay shrinks, but nothing
// is dropped and no packet overtakes an earlier one of its flow (which TCP
// would answer with duplicate ACKs and spurious fast retransmits). The
// limit is a safety valve, not an operating point: window-limited iSCSI
// flows put far fewer packets in flight at the delays we allow.
//
// Fail open, never drop: the rule has --queue-bypass (no listener: packets
// pass), the queue has NFQA_CFG_F_FAIL_OPEN (queue or socket full: packets
// pass), and Close accepts every held packet, removes the rules and sets,
// and drains what the kernel queued meanwhile before unbinding, because the
// kernel drops whatever is still queued when the socket closes. Callers
// must call Close on SIGTERM/SIGINT; after a crash (SIGKILL) the kernel
// drops the held packets — at most the delay's worth of traffic, which TCP
// retransmits — and CleanupDelayLine removes the stale rules and sets.
type DelayLine struct {
	cfg  DelayLineConfig
	cls  *Classifier
	q    *nfqueue.Conn
	tfd  int       // the timerfd, for settime (tf.Fd() would make it blocking)
	tf   *os.File  // the same fd in Go's netpoller, for waiting
	base time.Time // monotonic reference for mono()
	mon0 int64     // CLOCK_MONOTONIC at base

	setMu sync.Mutex // serialises Set, Clear and Close

	mu       sync.Mutex // everything below; held while sending verdicts so releases keep their order
	dq       *delayQueue
	settings map[netip.Addr]Setting
	ramps    map[netip.AddrPort]*flowRamp // per flow (consumer address and port)
	swept    int64                        // when ramps were last swept of idle flows
	counters map[netip.Addr]*DelayCounters
	stats    DelayLineStats
	armed    int64 // due time the timerfd is armed for, 0 if none pending
	closing  bool
	stopped  bool
	scratch  []uint32
	late     func(int64) // test/benchmark hook: lateness of each release

	recvDone  chan struct{}
	schedDone chan struct{}
}

// DelayLineConfig configures a DelayLine. Zero values take the defaults.
type DelayLineConfig struct {
	// Port is the iSCSI target port, matched as TCP source port (3260).
	Port uint16
	// Queue is the NFQUEUE number (0). One DelayLine per queue.
	Queue uint16
	// Chain is OUTPUT in target mode (default), FORWARD in bridge mode.
	Chain string
	// QueueLimit is the most packets held at once (4096).
	QueueLimit int
	// Label names the rules and sets (see Classifier) ("sanqos-dl").
	Label string
	// Ramp is how fast a consumer's delay may grow: ms of delay per ms
	// of its traffic (ramp.go); 0 applies a new delay at once.
	Ramp float64
	// Follow caps each packet's delay by a model of its sender's srtt
	// (follow.go) instead of Ramp: the fastest rise that sends no
	// spurious tail-loss probe. Excludes Ramp.
	Follow bool
}

// DelayCounters are one consumer's totals since the delay line started.
type DelayCounters struct {
	// Packets and Bytes were delayed (Bytes are full packet lengths).
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Acks of those Packets were pure ACKs (write delay).
	Acks uint64 `json:"acks"`
	// PassedAtLimit were released before their due time because
	// QueueLimit packets were held when another arrived.
	PassedAtLimit uint64 `json:"passed_at_limit"`
}

// DelayLineStats are totals that belong to no consumer.
type DelayLineStats struct {
	Held          int    `json:"held"`            // packets held now
	PassedAtLimit uint64 `json:"passed_at_limit"` // all consumers
	Unclassified  uint64 `json:"unclassified"`    // unparseable or not a consumer: accepted at once
	Errors        uint64 `json:"errors"`          // netlink receive/verdict errors
}

// delayLineClass is the classifier class the NFQUEUE rules belong to.
const delayLineClass = "q"

func (cfg *DelayLineConfig) fill() {
	if cfg.Port == 0 {
		cfg.Port = 3260
	}
	if cfg.Chain == "" {
		cfg.Chain = "OUTPUT"
	}
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 4096
	}
	if cfg.Label == "" {
		cfg.Label = "sanqos-dl"
	}
}

// NewDelayLine binds the queue, then installs the rules (so no packet is
// ever queued without a reader), in the caller's network namespace.
func NewDelayLine(cfg DelayLineConfig) (*DelayLine, error) {
	cfg.fill()
	if !nameRE.MatchString(cfg.Label) {
		return nil, fmt.Errorf("delayline: bad label %q", cfg.Label)
	}
	// A crashed instance with our label may still hold the queue's rule;
	// its sets are rebuilt below anyway.
	if err := CleanupDelayLine(cfg.Label); err != nil {
		return nil, err
	}
	q, err := nfqueue.Open(nfqueue.Config{
		Queue:     cfg.Queue,
		CopyRange: nfqueue.DefaultCopyRange,
		// Room for our held packets plus those in flight to us; past it
		// the kernel fails open too.
		MaxLen:     uint32(cfg.QueueLimit + 4096),
		Flags:      nfqueue.FlagFailOpen | nfqueue.FlagGSO,
		ReadBuffer: 8 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("delayline: %w", err)
	}
	// Non-blocking, so the scheduler goroutine waits in Go's netpoller
	// (epoll) rather than in a read(2) that pins a thread: a goroutine
	// blocked in a syscall keeps the runtime's sysmon waking every 20 µs
	// to take its P back, which was a quarter of the delay line's CPU
	// (perf, autonomic at 15 ms).
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("delayline: timerfd: %w", err)
	}
	d := &DelayLine{
		cfg: cfg, q: q, tfd: tfd, tf: os.NewFile(uintptr(tfd), "delayline-timerfd"),
		dq:        newDelayQueue(),
		settings:  map[netip.Addr]Setting{},
		ramps:     map[netip.AddrPort]*flowRamp{},
		counters:  map[netip.Addr]*DelayCounters{},
		recvDone:  make(chan struct{}),
		schedDone: make(chan struct{}),
	}
	var ts unix.Timespec
	d.base = time.Now()
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	d.mon0 = ts.Nano()
	go d.receive()
	go d.schedule()
	d.cls, err = NewClassifier(ClassifierConfig{
		Label: cfg.Label,
		Chain: cfg.Chain,
		Port:  cfg.Port,
		Classes: []Class{{
			Name:   delayLineClass,
			Target: []string{"NFQUEUE", "--queue-num", strconv.Itoa(int(cfg.Queue)), "--queue-bypass"},
		}},
	})
	if err != nil {
		d.shutdown()
		return nil, fmt.Errorf("delayline: %w", err)
	}
	return d, nil
}

// CleanupDelayLine removes the rules and sets a crashed delay line with this
// label left behind (the queue binding died with its process).
func CleanupDelayLine(label string) error {
	if label == "" {
		label = "sanqos-dl"
	}
	return CleanupClassifier(label)
}

func (d *DelayLine) Name() string { return "delayline" }

// Config returns the configuration in effect, defaults filled in.
func (d *DelayLine) Config() DelayLineConfig { return d.cfg }

// mono is CLOCK_MONOTONIC in ns, read through Go's vDSO clock.
func (d *DelayLine) mono() int64 { return d.mon0 + int64(time.Since(d.base)) }

func (d *DelayLine) Set(settings map[netip.Addr]Setting) error {
	if err := ValidateAll(settings); err != nil {
		return err
	}
	for a, s := range settings {
		if s.Rate != 0 {
			return fmt.Errorf("consumer %v: rate cap: %w", a, ErrUnsupported)
		}
	}
	d.setMu.Lock()
	defer d.setMu.Unlock()
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return errors.New("delayline closed")
	}
	old := d.settings
	next := maps.Clone(old)
	for a, s := range settings {
		a = a.Unmap()
		if s.IsZero() {
			delete(next, a)
		} else {
			next[a] = s
		}
	}
	// Publish before the set changes: a consumer entering the set finds
	// its delay ready, and one leaving has its held packets released now,
	// ahead of the undelayed ones that follow once it leaves the set.
	d.settings = next
	ids := d.scratch[:0]
	for a := range old {
		if _, ok := next[a]; !ok {
			ids = d.dq.drain(a, ids)
			for k := range d.ramps {
				if k.Addr() == a {
					delete(d.ramps, k)
				}
			}
		}
	}
	d.accept(ids)
	d.mu.Unlock()

	members := slices.Collect(maps.Keys(next))
	if err := d.cls.Update(map[string][]netip.Addr{delayLineClass: members}); err != nil {
		d.mu.Lock()
		d.settings = old
		d.mu.Unlock()
		return fmt.Errorf("delayline: %w", err)
	}
	return nil
}

func (d *DelayLine) Clear(consumers ...netip.Addr) error {
	if len(consumers) == 0 {
		consumers = slices.Collect(maps.Keys(d.List()))
	}
	m := make(map[netip.Addr]Setting, len(consumers))
	for _, a := range consumers {
		m[a] = Setting{}
	}
	return d.Set(m)
}

func (d *DelayLine) List() map[netip.Addr]Setting {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.settings)
}

// Counters returns a copy of every consumer's counters, including consumers
// no longer throttled (counters only grow, as metrics expect).
func (d *DelayLine) Counters() map[netip.Addr]DelayCounters {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[netip.Addr]DelayCounters, len(d.counters))
	for a, c := range d.counters {
		out[a] = *c
	}
	return out
}

// Stats returns the totals that belong to no consumer.
func (d *DelayLine) Stats() DelayLineStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Held = d.dq.len()
	return s
}

// Close accepts every held packet, removes the rules and sets, accepts what
// the kernel queued before the rules went, and unbinds the queue.
func (d *DelayLine) Close() error {
	d.setMu.Lock()
	defer d.setMu.Unlock()
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return nil
	}
	d.closing = true // from now on every packet is accepted on arrival
	d.accept(d.dq.drainAll(d.scratch[:0]))
	d.mu.Unlock()
	err := d.cls.Close()
	return errors.Join(err, d.shutdown())
}

// shutdown drains the socket up to a barrier and stops both goroutines.
func (d *DelayLine) shutdown() error {
	d.mu.Lock()
	d.closing = true
	d.mu.Unlock()
	var errs []error
	// With the rules gone nothing new is queued; everything queued
	// before is in our socket ahead of the barrier's ack.
	if err := d.q.Sync(); err != nil {
		errs = append(errs, fmt.Errorf("delayline: drain barrier: %w", err))
	}
	// Safety net should the ack be lost (it needs room in our socket).
	d.q.SetReadDeadline(time.Now().Add(2 * time.Second))
	<-d.recvDone
	d.mu.Lock()
	d.stopped = true
	d.arm(1) // in the past: wakes the scheduler at once
	d.mu.Unlock()
	<-d.schedDone
	d.tf.Close()
	if err := d.q.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// accept sends verdicts for ids; d.mu must be held.
func (d *DelayLine) accept(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	if err := d.q.SetVerdicts(ids, nfqueue.Accept); err != nil {
		d.stats.Errors++
	}
}

// arm sets the timerfd to fire at due; d.mu must be held.
func (d *DelayLine) arm(due int64) {
	if due < 1 {
		due = 1 // zero would disarm
	}
	d.armed = due
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(due)}
	if err := unix.TimerfdSettime(d.tfd, unix.TFD_TIMER_ABSTIME, &its, nil); err != nil {
		d.stats.Errors++
	}
}

func (d *DelayLine) receive() {
	defer close(d.recvDone)
	var now []uint32
	for {
		pkts, err := d.q.Receive()
		if len(pkts) > 0 {
			t := d.mono()
			d.mu.Lock()
			// Held packets already due leave with this batch's verdicts:
			// under steady traffic most releases then ride on a receive
			// instead of a timer wake-up of their own. Popped first, so a
			// consumer whose last held packet leaves here holds nothing
			// when its new packets are classified, and they follow it in
			// the same sendmsg.
			now = d.dq.popDue(t, now[:0], d.late)
			for i := range pkts {
				now = d.hold(&pkts[i], t, now)
			}
			// Sent under d.mu, so the scheduler cannot release an
			// earlier packet of the same consumer after these.
			d.accept(now)
			d.mu.Unlock()
		}
		if err == nfqueue.ErrSynced {
			return
		}
		if err != nil {
			if nfqueue.IsClosed(err) {
				return
			}
			d.mu.Lock()
			closing := d.closing
			if !nfqueue.IsTimeout(err) {
				d.stats.Errors++
			}
			d.mu.Unlock()
			if closing && nfqueue.IsTimeout(err) {
				return // the barrier failed; a deadline ended the drain
			}
		}
	}
}

// hold queues p, or appends it to now if it passes at once; at the queue
// limit it appends the packet due soonest instead. d.mu must be held.
func (d *DelayLine) hold(p *nfqueue.Packet, t int64, now []uint32) []uint32 {
	dst, port, kind := classifyPacket(p.Payload)
	perFlow := d.cfg.Ramp > 0 || d.cfg.Follow
	if !perFlow {
		// Without ramps, one FIFO per consumer: the delay line as
		// measured for the agent's figures (README).
		port = 0
	}
	s, ok := d.settings[dst]
	if d.closing {
		return append(now, p.ID)
	}
	if kind == kindUnknown || !ok && !d.dq.holds(dst) {
		d.stats.Unclassified++
		return append(now, p.ID)
	}
	c := d.counter(dst)
	delay, dir := s.ReadDelay, 0
	switch kind {
	case kindAck:
		delay, dir = s.WriteDelay, 1
	case kindSynAck:
		delay = max(s.ReadDelay, s.WriteDelay)
	}
	flow := netip.AddrPortFrom(dst, port)
	var r *flowRamp
	var ack uint32 // with Follow
	if d.cfg.Follow {
		ack = tcpAckNumber(p.Payload)
	}
	if perFlow {
		d.sweepRamps(t)
		r = d.ramps[flow]
		if r == nil {
			r = &flowRamp{}
			if kind == kindSynAck {
				// A new connection takes its consumer's delays at once:
				// its first RTT sample (this SYN-ACK) already holds them,
				// and starting it undelayed lets a throttled writer's new
				// login dump its queue on the disk (lab: p95 1.6 × the
				// threshold).
				r.ramp[0], r.ramp[1] = ramp{eff: int64(s.ReadDelay), at: t}, ramp{eff: int64(s.WriteDelay), at: t}
			}
			d.ramps[flow] = r
		}
		switch {
		case kind == kindSynAck:
		case d.cfg.Follow:
			delay = r.follow.limit(kind, delay, t, ack)
		default:
			delay = time.Duration(r.ramp[dir].next(int64(delay), t, d.cfg.Ramp))
		}
	}
	due := t
	if delay != 0 || d.dq.holds(dst) {
		if d.dq.len() >= d.cfg.QueueLimit {
			if id, a, ok := d.dq.popEarliest(); ok {
				now = append(now, id)
				d.counter(a).PassedAtLimit++
				d.stats.PassedAtLimit++
			}
		}
		due = d.dq.push(flow, p.ID, t+int64(delay))
		c.Packets++
		c.Bytes += uint64(p.Len())
		if kind == kindAck {
			c.Acks++
		}
		if d.armed == 0 || due < d.armed {
			d.arm(due)
		}
	} else {
		now = append(now, p.ID)
	}
	if d.cfg.Follow {
		r.follow.held(kind, t, due, ack)
	}
	return now
}

func (d *DelayLine) counter(a netip.Addr) *DelayCounters {
	c := d.counters[a]
	if c == nil {
		c = &DelayCounters{}
		d.counters[a] = c
	}
	return c
}

func (d *DelayLine) schedule() {
	defer close(d.schedDone)
	var buf [8]byte
	var out []uint32
	for {
		// Parks until the armed due time; re-arming from the receiver
		// moves the wake-up earlier (settime clears a pending expiry, and
		// the netpoller reports the next one).
		if _, err := d.tf.Read(buf[:]); err != nil {
			d.mu.Lock()
			d.stats.Errors++
			stopped := d.stopped
			d.mu.Unlock()
			if stopped {
				return
			}
			continue
		}
		d.mu.Lock()
		t := d.mono()
		out = d.dq.popDue(t, out[:0], d.late)
		if len(out) > 0 {
			if err := d.q.SetVerdicts(out, nfqueue.Accept); err != nil {
				d.stats.Errors++
			}
		}
		if next, ok := d.dq.next(); ok {
			d.arm(next)
		} else {
			d.armed = 0
		}
		stopped := d.stopped
		d.mu.Unlock()
		if stopped {
			return
		}
	}
}
