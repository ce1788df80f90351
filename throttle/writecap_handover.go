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
// retransmissions, 8 RTOs). Unsteering the consumer while its segments
// are still on the IFB path — in the class, or past it in the IFB's own
// queue, which no class statistic shows — lets its next segments
// overtake them: duplicate ACKs, a spurious fast retransmit (the
// stock-kernel guest's TestWriteCapLiftDrains, two CI runs in three,
// when user space unsteered as soon as the class looked empty).
//
// So the hand-over is the packet path's own decision, in two steps. The
// lifted consumer's class opens to the link rate and its segments still
// go into it, until the class has been seen empty: an HTB class waiting
// for tokens at its old rate keeps waiting after a rate change, up to one
// packet's time at that rate (125 ms for 64 KiB at 512 KiB/s), and the
// writer, its whole window queued, sends nothing meanwhile — a pause that
// must not count as the gap below (lab test: 79 fast retransmissions when
// it did). Then the map entry is marked handed over: the steering
// program keeps sending the consumer's segments into the open class while
// they follow each other closer than writeCapQuiet, and passes them
// straight on from the first longer gap, after which it never steers that
// consumer again (the entry's last-steered time stops moving). Nothing
// can still be on the IFB path behind a gap that long: an open class and
// the IFB forward in microseconds. User space reaps the entry and the
// class once the program has stopped steering. A writer that never
// pauses for writeCapQuiet stays on the open class, shaped by nothing but
// the link.

// writeCapQuiet is the gap after which a handed-over consumer's segments
// take the direct path. The gap is measured where the program runs, in
// the receive softirq, so a CPU taken away mid-softirq stretches it
// while a segment already redirected waits for the IFB's tasklet (it
// runs after the receive softirq): the next segment then goes direct and
// overtakes it. A target that runs in a VM loses its vCPU for
// milliseconds; at 5 ms the stock-kernel TCG guest's
// TestWriteCapLiftDrains saw one spurious fast retransmit in about ten
// CI runs. The lab machine (a microVM) had 677 CPU stalls of 5 ms or
// more and 29 of 20 ms or more over three readers runs (the stall
// watch's stalls.csv, 2026-11-29): 20 ms makes an overtaking stall about
// twenty times rarer, and is still short of the pauses of a writer that
// is not saturating. One that never pauses that long stays on its open
// class, which costs the IFB's CPU and shapes nothing.
const writeCapQuiet = 20 * time.Millisecond

// wcapValue is the steering map's value (16 bytes, the program's
// offsets 0, 4 and 8).
type wcapValue struct {
	Class    uint32 // the consumer's class, major:minor
	HandOver uint32 // non-zero: the cap is lifted, hand the consumer over
	Last     uint64 // CLOCK_MONOTONIC ns of the last segment steered while handing over
}

const wcapValueSize = 16

// handOver opens the lifted consumers' classes; reap marks them handed
// over once empty. Their minors stay used until reap removes them. Called
// with w.mu held, with the caps still in w.cur.
func (w *WriteCap) handOver(lifted []netip.Addr) {
	for _, a := range lifted {
		c := w.cur[a]
		if err := netlink.ClassChange(w.openClass(c.minor)); err != nil {
			w.cfg.Log.Warn("write cap: opening a lifted cap's class", "consumer", a, "err", err)
		}
		w.draining[a] = drainingCap{minor: c.minor}
	}
}

// drainingCap is a lifted cap being handed over.
type drainingCap struct {
	minor  uint16
	marked bool // the map entry says hand over (the class was seen empty)
}

// openClass is a consumer class at the link rate.
func (w *WriteCap) openClass(minor uint16) *netlink.HtbClass {
	return w.class(htbConsumer{minor: minor, rate: w.cfg.LinkRate})
}

// reap moves the hand-overs on: an opened class seen empty gets its
// entry marked; a marked consumer that the program no longer steers (no
// segment steered for two quiet gaps, so none is being steered now) and
// whose class is empty loses its entry and its class. Called with w.mu
// held: by Set and by the guard's every check.
func (w *WriteCap) reap() {
	if len(w.draining) == 0 {
		return
	}
	qlen, err := tcClassQlens(w.ifb)
	if err != nil {
		return
	}
	now := monoNow()
	for a, d := range w.draining {
		key, _ := ipv4Key(a) // every capped consumer is IPv4 (Set refuses the rest)
		handle := netlink.MakeHandle(w.major, d.minor)
		if qlen[handle] > 0 {
			continue
		}
		if !d.marked {
			v := wcapValue{Class: handle, HandOver: 1, Last: now}
			if err := w.consumers.Put(key, v); err != nil {
				w.cfg.Log.Warn("write cap: handing a lifted cap over", "consumer", a, "err", err)
				continue
			}
			w.draining[a] = drainingCap{minor: d.minor, marked: true}
			continue
		}
		var v wcapValue
		if err := w.consumers.Lookup(key, &v); err == nil && v.HandOver != 0 && now-v.Last < uint64(2*writeCapQuiet) {
			continue
		}
		_ = w.consumers.Delete(key)
		_ = netlink.ClassDel(w.openClass(d.minor))
		delete(w.draining, a)
		delete(w.minor, d.minor)
	}
}

// reapChecked is reap for the guard, which holds no lock.
func (w *WriteCap) reapChecked() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reap()
}

// The write caps' guard (guard.go): their consumers are in a BPF map
// nobody else can reach; what can go is the IFB with its tree and the
// steering filters with their clsact.

// check finds the IFB with our HTB root, and both filters on the
// device's ingress hook.
func (w *WriteCap) check(cc *checkConn) error {
	w.reapChecked()
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
