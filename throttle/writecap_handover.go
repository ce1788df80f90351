package throttle

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// Lifting a write cap must neither drop nor reorder what the consumer's
// class still holds. Deleting the class drops its queue (up to the
// writer's window: TCP resends it, after an RTO if it was the tail; lab,
// twelve writers at 10 ms with caps deleted at once: 226 drops, 658
// retransmissions, 8 RTOs). Unsteering the consumer while any of its
// segments is still on the IFB path lets its next segments overtake them:
// duplicate ACKs, a spurious fast retransmit of everything held (the
// stock-kernel guest's TestWriteCapLiftDrains, two CI runs in three, when
// user space unsteered as soon as the class looked empty).
//
// The IFB path is: the steering program, mirred, the consumer's HTB
// class, the IFB's own queue (past every class, in no qdisc's
// statistics) and its tasklet, which hands the segment to the stack. An
// open class forwards in microseconds, but not always: a class seen empty
// may still owe tokens at its old rate (HTB keeps the debt across a rate
// change: up to one packet's time at that rate, 125 ms for 64 KiB at 512
// KiB/s), and the IFB's tasklet runs after the receive softirq, late when
// the host takes the vCPU away mid-softirq or the softirq is left to a
// ksoftirqd that waits for a CPU. So no gap between a writer's segments
// proves its path empty: handed over at its first 20 ms gap, the writer
// of TestWriteCapLiftSlowPath, its path slowed on purpose, overtook
// itself in 11 runs of 11.
//
// So the hand-over waits for the kernel's own counts. Lifting opens the
// class to the link rate and marks the consumer's map entry: the program
// keeps steering it into the class, and stamps the entry with each
// segment's time (Last). The drainer, every writeCapPoll, reads the
// entries, then the classes' queues, then the IFB's counters; when a
// consumer's Last has not moved since its previous round, its class was
// empty then and the IFB has since delivered every packet it had taken
// by then, nothing steered up to Last is on the path, and it writes Last
// into the drained map. The program passes a segment straight on only if
// the entry's Last equals the drained one: nothing steered since the path
// was found empty. A segment steered meanwhile moves Last, and the
// consumer stays in its class until the drainer has seen that one
// through too. Left: a segment between the program and its class, or
// between the class and the IFB's queue, when the check runs — code that
// runs with bottom halves off (not preemptible but under PREEMPT_RT),
// microseconds, which only a vCPU stall in exactly that window stretches.
//
// A writer that never leaves its path empty for two polls is handed over
// anyway at writeCapHandOverMax, unverified (fail open: it is no longer
// capped either way, and an IFB path kept forever costs CPU), logged and
// counted (ForcedHandOvers): its next segments may overtake its last
// ones once.

// writeCapPoll is how often the drainer checks the paths of the caps
// being handed over: a writer is handed over at its first pause of about
// two polls with its path empty.
const writeCapPoll = 5 * time.Millisecond

// writeCapHandOverMax bounds a hand-over; past it the consumer is
// unsteered without a verified empty path.
const writeCapHandOverMax = 2 * time.Second

// wcapValue is the steering map's value (16 bytes, the program's
// offsets 0, 4 and 8).
type wcapValue struct {
	Class    uint32 // the consumer's class, major:minor
	HandOver uint32 // non-zero: the cap is lifted, hand the consumer over
	Last     uint64 // CLOCK_MONOTONIC ns of the last segment steered while handing over (the lift's, before any)
}

const wcapValueSize = 16

// drainingCap is a lifted cap being handed over, and what the drainer's
// last round saw of it.
type drainingCap struct {
	minor  uint16
	since  time.Time // lifted at
	seen   bool      // a round has seen it (the fields below are that round's)
	last   uint64    // its entry's Last
	empty  bool      // its class was empty (read after last)
	in     uint64    // packets the IFB had taken in to deliver (read after the class)
	handed bool      // the program had been told the path is empty, and had steered nothing since
	forced bool      // unsteered at writeCapHandOverMax: its class goes once empty
}

// handOver opens the lifted consumers' classes and marks their entries;
// the drainer hands them over. Their minors stay used until it removes
// them. Called with w.mu held, with the caps still in w.cur.
func (w *WriteCap) handOver(lifted []netip.Addr) {
	now := monoNow()
	for _, a := range lifted {
		c := w.cur[a]
		key, _ := ipv4Key(a) // every capped consumer is IPv4 (Set refuses the rest)
		if err := netlink.ClassChange(w.openClass(c.minor)); err != nil {
			w.cfg.Log.Warn("write cap: opening a lifted cap's class", "consumer", a, "err", err)
		}
		_ = w.drained.Delete(key) // an earlier hand-over's verdict is not this one's
		if err := w.consumers.Put(key, wcapValue{Class: netlink.MakeHandle(w.major, c.minor), HandOver: 1, Last: now}); err != nil {
			w.cfg.Log.Warn("write cap: marking a lifted cap", "consumer", a, "err", err)
		}
		w.draining[a] = drainingCap{minor: c.minor, since: time.Now()}
	}
	if len(lifted) > 0 {
		select {
		case w.drain.kick <- struct{}{}:
		default:
		}
	}
}

// openClass is a consumer class at the link rate.
func (w *WriteCap) openClass(minor uint16) *netlink.HtbClass {
	return w.class(htbConsumer{minor: minor, rate: w.cfg.LinkRate})
}

// drainer runs the hand-overs' rounds every writeCapPoll while there are
// any, on a thread of its own in the creator's network namespace (as the
// guard: netlink talks to the namespace of its thread).
type drainer struct{ kick, stop, done chan struct{} }

func (w *WriteCap) startDrainer() {
	d := &w.drain
	d.kick, d.stop, d.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	enter := creatorNS()
	go func() {
		defer close(d.done)
		if err := enter(); err != nil {
			w.cfg.Log.Error("write caps: lifted caps will not be handed over", "err", err)
			return
		}
		for {
			select {
			case <-d.stop:
				return
			case <-d.kick:
			}
			t := time.NewTicker(writeCapPoll)
			for more := true; more; more = w.drainRound() {
				select {
				case <-d.stop:
					t.Stop()
					return
				case <-t.C:
				}
			}
			t.Stop()
		}
	}()
}

// end stops the drainer (again: a no-op).
func (d *drainer) end() {
	if d.stop == nil {
		return
	}
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

// drainRound moves every hand-over one round on and says whether any is
// left. The entries are read first, then the classes' queues, then the
// IFB's counters: each later reading covers what the earlier ones saw
// steered.
func (w *WriteCap) drainRound() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.draining) == 0 {
		return false
	}
	type entry struct {
		v       wcapValue
		ok      bool
		drained uint64
		told    bool // drained is there
	}
	entries := make(map[netip.Addr]entry, len(w.draining))
	for a := range w.draining {
		key, _ := ipv4Key(a)
		var e entry
		e.ok = w.consumers.Lookup(key, &e.v) == nil
		e.told = w.drained.Lookup(key, &e.drained) == nil
		entries[a] = e
	}
	// Unread (a netlink error), a class counts as not empty: nothing is
	// handed over on it, but the deadline still holds.
	qlen, qerr := tcClassQlens(w.ifb)
	in, out, ierr := ifbCounts(w.ifb.Attrs().Index)
	for a, d := range w.draining {
		e := entries[a]
		empty := qerr == nil && ierr == nil && qlen[netlink.MakeHandle(w.major, d.minor)] == 0
		handed := e.ok && e.told && e.drained == e.v.Last
		key, _ := ipv4Key(a)
		switch {
		case d.forced || !e.ok:
			// Unsteered: the class goes once it has let go of what it held.
			if empty || time.Since(d.since) > 2*writeCapHandOverMax {
				w.reapCap(a, d.minor)
				continue
			}
			d.forced = true
		case handed && d.handed && empty:
			// Told a round ago and nothing steered since: the program
			// passes the consumer's segments, its entry and class can go.
			w.reapCap(a, d.minor)
			continue
		case !handed && d.seen && d.last == e.v.Last && d.empty && out >= d.in:
			if err := w.drained.Put(key, e.v.Last); err != nil {
				w.cfg.Log.Warn("write cap: handing a lifted cap over", "consumer", a, "err", err)
			}
		case !handed && time.Since(d.since) > writeCapHandOverMax:
			_ = w.consumers.Delete(key)
			d.forced = true
			w.cfg.Log.Warn("write cap: lifted cap unsteered without an empty path: its path never emptied between its segments; they may arrive out of order once",
				"consumer", a, "after", writeCapHandOverMax, "forced_hand_overs", w.forced.Add(1))
		}
		d.seen, d.last, d.empty, d.in, d.handed = true, e.v.Last, empty, in, handed
		w.draining[a] = d
	}
	return len(w.draining) > 0
}

// reapCap removes a handed-over consumer's entries and class.
func (w *WriteCap) reapCap(a netip.Addr, minor uint16) {
	key, _ := ipv4Key(a)
	_ = w.consumers.Delete(key)
	_ = w.drained.Delete(key)
	_ = netlink.ClassDel(w.openClass(minor))
	delete(w.draining, a)
	delete(w.minor, minor)
}

// ifbCounts is what the IFB has taken in to deliver (packets, less those
// it dropped at once: it takes only redirected ones) and what it has
// delivered. It has one queue, first in first out: once out reaches an
// earlier in, everything it held then has left.
func ifbCounts(index int) (in, out uint64, err error) {
	l, err := netlink.LinkByIndex(index)
	if err != nil {
		return 0, 0, err
	}
	s := l.Attrs().Statistics
	if s == nil {
		return 0, 0, errors.New("no statistics")
	}
	return s.RxPackets - s.RxDropped, s.TxPackets, nil
}

// ForcedHandOvers is how many lifted caps were unsteered at
// writeCapHandOverMax without a verified empty path.
func (w *WriteCap) ForcedHandOvers() uint64 { return w.forced.Load() }

// The write caps' guard (guard.go): their consumers are in a BPF map
// nobody else can reach; what can go is the IFB with its tree and the
// steering filters with their clsact.

// check finds the IFB with our HTB root, and both filters on the
// device's ingress hook.
func (w *WriteCap) check(cc *checkConn) error {
	if err := w.checkIFB(cc); err != nil {
		return err
	}
	return w.checkSteering(cc)
}

func (w *WriteCap) checkIFB(cc *checkConn) error {
	h, kind, err := cc.rootQdisc(w.ifb.Attrs().Index)
	if errors.Is(err, errNoDevice) {
		return broken("IFB %s is gone", w.ifb.Attrs().Name)
	}
	if err != nil {
		return fmt.Errorf("root qdisc of %s: %w", w.ifb.Attrs().Name, err)
	}
	if uint16(h>>16) != w.major || kind != "htb" {
		return broken("root qdisc of IFB %s is %s %s, not sanqos' htb", w.ifb.Attrs().Name, kind, tcHandleString(h))
	}
	return nil
}

func (w *WriteCap) checkSteering(cc *checkConn) error {
	fs, err := cc.filters(w.dev.Attrs().Index, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return fmt.Errorf("ingress filters of %s: %w", w.cfg.Device, err)
	}
	progPrio, redirPrio := writeCapPrios(w.major)
	if !hasFilter(fs, progPrio, 1) || !hasFilter(fs, redirPrio, 0) {
		return broken("the steering filters are gone from %s's ingress (clsact deleted?)", w.cfg.Device)
	}
	return nil
}

// repair rebuilds the IFB and its tree with the current caps' classes
// if any of it went (steering off first), and the steering filters if
// they went. The map that names each capped consumer's class is ours
// alone and still holds them. On error nothing of the label's steering
// or IFB stays: writes flow uncapped until the next try.
func (w *WriteCap) repair() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cc := &checkConn{}
	defer cc.close()
	ifb := w.checkIFB(cc)
	if ifb != nil && !errors.Is(ifb, errBroken) {
		return ifb
	}
	err := func() error {
		if ifb == nil {
			if err := w.checkSteering(cc); !errors.Is(err, errBroken) {
				return err
			}
			if err := errors.Join(unsteerWriteCap(w.cfg.Label)...); err != nil {
				return err
			}
			return w.steer()
		}
		if err := CleanupWriteCap(w.cfg.Label); err != nil {
			return err
		}
		if err := w.buildIFB(); err != nil {
			return err
		}
		for a, c := range w.cur {
			if err := netlink.ClassAdd(w.class(c)); err != nil {
				return fmt.Errorf("write cap class for %v: %w", a, err)
			}
		}
		for a, d := range w.draining {
			if err := netlink.ClassAdd(w.openClass(d.minor)); err != nil {
				return fmt.Errorf("write cap class for %v (being lifted): %w", a, err)
			}
		}
		return w.steer()
	}()
	if err != nil {
		return errors.Join(err, CleanupWriteCap(w.cfg.Label))
	}
	return nil
}
