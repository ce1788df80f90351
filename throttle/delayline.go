package throttle

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/nfqueue"
	"golang.org/x/sys/unix"
)

func init() {
	Register(Entry{Name: "delayline", Rank: 30, Auto: true, AutoHas: "(userspace delay: needs only netfilter queueing)",
		About: "userspace delay: NFQUEUE, the agent releases each packet",
		Caps:  Caps{Delay: true, IPv6: true}, Parts: PartIptables | PartQueue,
		Needs:     delayLineNeeds,
		Objects:   []Objects{{"-dl", CleanupDelayLine}},
		Probe:     func() (bool, string, error) { ok, why := delayLineAvailable(); return ok, why, nil },
		Build:     newDelayLineFrom,
		Collector: delayLineCollector})
}

func delayLineNeeds(w WriteOn) [][]Feature {
	n := append([][]Feature{
		{{"nfqueue", "nfnetlink_queue", "CONFIG_NETFILTER_NETLINK_QUEUE", "nfnetlink_queue"}},
		{{"iptable_filter", "filter table", "CONFIG_IP_NF_FILTER", "iptable_filter"}},
		{{"xt_NFQUEUE", "iptables -j NFQUEUE", "CONFIG_NETFILTER_XT_TARGET_NFQUEUE", "xt_NFQUEUE"}},
	}, needSets...)
	if w == WriteOnReplies {
		// Replies leave pure ACKs out of the queue by -m u32.
		n = append(n, []Feature{kXtU32})
	}
	return n
}

func newDelayLineFrom(o Options, w WriteOn) (Throttle, error) {
	return NewDelayLine(DelayLineConfig{Ports: o.Ports, Chain: o.Chain, Label: o.Label + "-dl", QueueLimit: o.QueueLimit,
		Follow: o.Follow, WriteOn: w, Check: o.Check, Log: o.Log})
}

// delayLineAvailable checks what the NFQUEUE delay line needs: the
// kernel's nfnetlink_queue (its /proc file appears with the module) and
// iptables to install the NFQUEUE rule.
func delayLineAvailable() (bool, string) {
	if _, err := os.Stat("/proc/net/netfilter/nfnetlink_queue"); err != nil && !kernelModule("nfnetlink_queue") {
		return false, "kernel has no nfnetlink_queue (CONFIG_NETFILTER_NETLINK_QUEUE)"
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return false, "no iptables binary for the NFQUEUE rule"
	}
	return true, "kernel has nfnetlink_queue (userspace delay line: a packet's round trip through the agent)"
}

// DelayLine is the userspace packet-delay backend. An iptables rule (one per
// family, queueRules) sends packets from the storage port to the
// throttled consumers into an NFQUEUE; the delay line holds each one for its
// consumer's delay, counted from when it reached us, then accepts it
// unchanged. With WriteOnReplies (default) the rules leave pure ACKs out
// of the queue, and every segment with payload gets the larger of the
// consumer's read and write delays: a writer's R2Ts and status wait, its
// data is acknowledged on time. With WriteOnACKs (the thesis) pure ACKs
// get the write delay (the consumer's send window opens later), everything
// else the read delay.
//
// Ordering: each flow's packets (consumer address and port) wait in one
// FIFO and leave from its head, so no packet overtakes an earlier one of
// the same flow; a packet with a short delay behind one with a long delay
// waits for it.
//
// Following: with Follow, each flow's packets get at most what a model of
// their sender's srtt allows (follow.go), so a throttled sender's srtt
// keeps up and it sends no spurious tail-loss probes, and the delay rises
// as fast as that allows. Without it, a new delay applies at once. A
// SYN-ACK always gets the larger of the two delays: it is the first RTT
// sample of both ends.
//
// Timing and cost: one goroutine does all the packet work. It waits in
// Go's netpoller on an epoll set holding the queue's socket and a timerfd
// armed for the next due packet (absolute CLOCK_MONOTONIC, no timer slack;
// Go timers round sub-ms waits up to 1 ms), then, without blocking again,
// releases what is due, reads what arrived and sends every verdict in one
// write. Those calls are raw system calls: the runtime's bookkeeping for
// calls that may block woke its sysmon thread on every packet. In the lab,
// against the earlier design (a goroutine each for receiving and releasing,
// mdlayher/netlink's per-call watcher goroutines), a held packet went from
// ~250 µs of agent CPU to ~130 µs, a fifth of which is the receiving
// namespace's network stack that veth runs in our context (README, Known
// limitations, "The delay line costs CPU").
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
	cls  *queueRules
	q    *nfqueue.Conn
	qfd  int       // q's socket, read by run, written under mu
	tfd  int       // timerfd for the next due time (absolute, no slack)
	epfd int       // epoll set of qfd and tfd, for the raw epoll_wait
	ep   *os.File  // the same set in Go's netpoller (ep.Fd() would make it blocking)
	base time.Time // monotonic reference for mono()
	mon0 int64     // CLOCK_MONOTONIC at base

	setMu sync.Mutex // serialises Set, Clear and Close

	mu       sync.Mutex // everything below; held while sending verdicts so releases keep their order
	dq       *delayQueue
	settings map[netip.Addr]Setting
	flows    map[netip.AddrPort]*follow // per flow (consumer address and port), with Follow
	swept    int64                      // when flows were last swept of idle ones
	counters map[netip.Addr]*DelayCounters
	stats    DelayLineStats
	closing  bool
	scratch  []uint32
	vbuf     []byte      // verdict messages, reused
	late     func(int64) // test/benchmark hook: lateness of each release

	// drainBy bounds the drain on Close, should the barrier's ack be lost.
	drainBy atomic.Int64
	done    chan struct{}

	*guard // puts the rules and sets back when someone removes them (Reinstalls)
}

// DelayLineConfig configures a DelayLine. Zero values take the defaults.
type DelayLineConfig struct {
	// Ports are the target's ports, matched as TCP source port (none:
	// 3260, iSCSI's).
	Ports []uint16
	// Queue is the NFQUEUE number (0). One DelayLine per queue.
	Queue uint16
	// Chain is OUTPUT in target mode (default), FORWARD in bridge mode.
	Chain string
	// QueueLimit is the most packets held at once (4096).
	QueueLimit int
	// Label names the rules and sets (see queueRules) ("sanqos-dl").
	Label string
	// Follow caps each packet's delay by a model of its sender's srtt
	// (follow.go): the fastest rise that sends no spurious tail-loss
	// probe.
	Follow bool
	// WriteOn says which packets carry the write delay (replies).
	WriteOn WriteOn
	// Check is how often the rules and sets are checked, and put back
	// with the current members if someone removed them (guard.go):
	// DefaultCheck if 0, never if negative.
	Check time.Duration
	// Log receives the guard's reports (default slog.Default()).
	Log *slog.Logger
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
	// Late is how late held packets left against their due time: the
	// line's own error, added to every delay it applies.
	Late Lateness `json:"release_late"`
}

func (cfg *DelayLineConfig) fill() {
	if len(cfg.Ports) == 0 {
		cfg.Ports = []uint16{3260}
	}
	cfg.Chain = cmp.Or(cfg.Chain, "OUTPUT")
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 4096
	}
	cfg.Label = cmp.Or(cfg.Label, "sanqos-dl")
}

// NewDelayLine binds the queue, then installs the rules (so no packet is
// ever queued without a reader), in the caller's network namespace.
func NewDelayLine(cfg DelayLineConfig) (*DelayLine, error) {
	cfg.fill()
	if !nameRE.MatchString(cfg.Label) || len(cfg.Label) > 20 {
		return nil, fmt.Errorf("delayline: label %q: want 1-20 of [A-Za-z0-9_-]", cfg.Label)
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
	qfd, err := q.FD()
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("delayline: %w", err)
	}
	// A timerfd (no timer slack) for due times, in one epoll set with the
	// socket, so one goroutine waits for both in the netpoller.
	tfd, epfd, ep, err := pollSet(qfd)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("delayline: %w", err)
	}
	d := &DelayLine{
		cfg: cfg, q: q, qfd: qfd, tfd: tfd, epfd: epfd, ep: ep,
		dq:       newDelayQueue(),
		settings: map[netip.Addr]Setting{},
		flows:    map[netip.AddrPort]*follow{},
		counters: map[netip.Addr]*DelayCounters{},
		done:     make(chan struct{}),
	}
	var ts unix.Timespec
	d.base = time.Now()
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	d.mon0 = ts.Nano()
	go d.run()
	d.cls, err = newQueueRules(cfg.Label, cfg.Chain, cfg.Ports, queuedMatch(cfg.WriteOn),
		[]string{"NFQUEUE", "--queue-num", strconv.Itoa(int(cfg.Queue)), "--queue-bypass"})
	if err != nil {
		d.shutdown()
		return nil, fmt.Errorf("delayline: %w", err)
	}
	d.guard = startGuard(&guard{what: "delayline", interval: cfg.Check, log: cfg.Log, check: d.cls.check,
		repair: func() error {
			d.setMu.Lock()
			defer d.setMu.Unlock()
			return d.cls.reinstall()
		}})
	return d, nil
}

// queuedMatch is what the queue's rules take besides the consumer set:
// with WriteOnACKs every packet; with WriteOnReplies every packet but the
// pure ACKs, which nothing delays then and which would only cost a trip
// through userspace each (they are most of a writer's packets). u32 reads
// fail past the end of the packet, so "a 4-byte read at IHL·4 + doff·4"
// means "at least 4 bytes of payload"; header lengths are multiples of 4,
// so a total length that is not has 1–3. SYN, FIN and RST are queued too,
// to stay in order with the data of their connection. IPv6 assumes no
// extension headers (the userspace classifier treats those as data).
func queuedMatch(w WriteOn) map[int][][]string {
	if w == WriteOnACKs {
		return nil
	}
	ctl := []string{"-m", "tcp", "!", "--tcp-flags", "SYN,FIN,RST", "NONE"}
	return map[int][][]string{
		4: {ctl,
			{"-m", "u32", "--u32", "0>>22&0x3C@12>>26&0x3C@0=0:4294967295"},
			{"-m", "u32", "--u32", "0&0x3=1:3"}},
		6: {ctl,
			{"-m", "u32", "--u32", "52>>26&0x3C@40=0:4294967295"},
			{"-m", "u32", "--u32", "4>>16&0x3=1:3"}},
	}
}

// CleanupDelayLine removes the rules and sets a crashed delay line with this
// label left behind (the queue binding died with its process).
func CleanupDelayLine(label string) error {
	label = cmp.Or(label, "sanqos-dl")
	return cleanupQueueRules(label)
}

func (d *DelayLine) Name() string { return "delayline" }

// Config returns the configuration in effect, defaults filled in.
func (d *DelayLine) Config() DelayLineConfig { return d.cfg }

// mono is CLOCK_MONOTONIC in ns, read through Go's vDSO clock.
func (d *DelayLine) mono() int64 { return d.mon0 + int64(time.Since(d.base)) }

func (d *DelayLine) Set(settings map[netip.Addr]Setting) error {
	if err := validateFor("delayline", Caps{Delay: true}, settings); err != nil {
		return err
	}
	// Without ip6tables no rule queues IPv6: its consumers are left out
	// and named in the error, the IPv4 ones go ahead.
	refused := &refusals{backend: "delayline"}
	if !d.cls.hasIPv6() {
		settings, refused = only4("delayline", settings, func(s Setting) bool { return !s.IsZero() }, errNoIP6tables)
	}
	d.setMu.Lock()
	defer d.setMu.Unlock()
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return errors.New("delayline closed")
	}
	// In place, O(changed): the settings are a batch of changes (the
	// agent's actuator sends what differs); undo keeps what each changed
	// consumer had, to restore it if the set refuses the update. Keys
	// are unmapped first (rarely needed), so each consumer comes once.
	for a := range settings {
		if a.Is4In6() {
			settings = unmapped(settings)
			break
		}
	}
	type was struct {
		a   netip.Addr
		s   Setting
		had bool
	}
	undo := make([]was, 0, len(settings))
	var add, del []netip.Addr
	ids := d.scratch[:0]
	// Published before the set changes: a consumer entering the set finds
	// its delay ready, and one leaving has its held packets released now,
	// ahead of the undelayed ones that follow once it leaves the set.
	for a, s := range settings {
		p, had := d.settings[a]
		switch {
		case !s.IsZero():
			d.settings[a] = s
			if !had {
				add = append(add, a)
			}
		case had:
			delete(d.settings, a)
			del = append(del, a)
			ids = d.dq.drain(a, ids)
		default:
			continue
		}
		undo = append(undo, was{a, p, had})
	}
	if len(del) > 0 {
		for k := range d.flows { // one pass, not one per consumer released
			if _, ok := d.settings[k.Addr()]; !ok {
				delete(d.flows, k)
			}
		}
	}
	d.accept(ids)
	d.mu.Unlock()

	if err := d.cls.update(add, del); err != nil {
		d.mu.Lock()
		for _, w := range undo {
			if w.had {
				d.settings[w.a] = w.s
			} else {
				delete(d.settings, w.a)
			}
		}
		d.mu.Unlock()
		return fmt.Errorf("delayline: %w", err)
	}
	return refused.err()
}

// unmapped is settings keyed by plain addresses (plainAddr's Unmap).
func unmapped(settings map[netip.Addr]Setting) map[netip.Addr]Setting {
	out := make(map[netip.Addr]Setting, len(settings))
	for a, s := range settings {
		out[a.Unmap()] = s
	}
	return out
}

// errNoIP6tables is why the delay line cannot delay an IPv6 consumer on a
// host without ip6tables.
var errNoIP6tables = fmt.Errorf("IPv6 without ip6tables: %w", ErrUnsupported)

func (d *DelayLine) List() map[netip.Addr]Setting {
	return listed(&d.mu, d.settings, func(s Setting) Setting { return s })
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
	d.guard.end() // first: a repair takes setMu, and must not follow Close
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
	err := d.cls.close()
	return errors.Join(err, d.shutdown())
}

// shutdown drains the socket up to a barrier and stops the loop.
func (d *DelayLine) shutdown() error {
	d.mu.Lock()
	d.closing = true
	d.mu.Unlock()
	var errs []error
	// With the rules gone nothing new is queued; everything queued
	// before is in our socket ahead of the barrier's ack.
	d.drainBy.Store(d.mono() + int64(2*time.Second))
	if err := d.q.Sync(); err != nil {
		errs = append(errs, fmt.Errorf("delayline: drain barrier: %w", err))
		d.drainBy.Store(d.mono()) // nothing to wait for: end at the next wake
	}
	// The loop ends on the barrier's ack, or at drainBy by the timer.
	_ = rawTimerfdSet(d.tfd, d.drainBy.Load())
	select {
	case <-d.done:
	case <-time.After(3 * time.Second):
		errs = append(errs, errors.New("delayline: drain did not end; closing the queue"))
	}
	if err := d.q.Close(); err != nil {
		errs = append(errs, err)
	}
	unix.Close(d.tfd)
	d.ep.Close()
	return errors.Join(errs...)
}

// accept sends verdicts for ids; d.mu must be held.
func (d *DelayLine) accept(ids []uint32) {
	if len(ids) == 0 {
		return
	}
	var err error
	if d.vbuf, err = d.q.WriteVerdicts(d.qfd, d.vbuf, ids, nfqueue.Accept); err != nil {
		d.stats.Errors++
	}
}

func (d *DelayLine) counter(a netip.Addr) *DelayCounters {
	c := d.counters[a]
	if c == nil {
		c = &DelayCounters{}
		d.counters[a] = c
	}
	return c
}
