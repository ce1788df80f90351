package throttle

import (
	"fmt"
	"net/netip"
	"os"
	"unsafe"

	"github.com/sanqos/sanqos/nfqueue"
	"golang.org/x/sys/unix"
)

// This file holds the delay line's packet loop: the one goroutine that
// waits on the queue's socket and a timerfd, releases what is due and
// holds what arrived, with the raw system calls it makes per packet. It
// is its own file because it is the hot path the DelayLine comment's
// "Timing and cost" speaks of; delayline.go keeps the type, its setup,
// its API and its shutdown, delayline_queue.go the clock-free FIFOs.

// run is the delay line's only packet-handling goroutine: wait for a
// packet or the next due time, release what is due, hold what came.
func (d *DelayLine) run() {
	defer close(d.done)
	rc, err := d.ep.SyscallConn()
	if err != nil {
		panic(err) // an *os.File from os.NewFile always has one
	}
	evs := make([]unix.EpollEvent, 4)
	buf := make([]byte, 64<<10)
	var pkts []nfqueue.Packet
	var out []uint32
	var armed int64 // due time the timerfd is set for, 0 if none
	var tbuf [8]byte
	late := func(ns int64) {
		d.stats.Late.observe(ns)
		if d.late != nil {
			d.late(ns)
		}
	}
	// The callback runs until the end: returning false parks this
	// goroutine in the netpoller until our epoll set has an event again.
	// Edge-triggered there, so each pass empties the set first.
	rc.Read(func(uintptr) bool {
		for {
			n, err := rawEpollWait(d.epfd, evs)
			if err == unix.EINTR {
				continue
			}
			if n <= 0 {
				return false
			}
			synced := false
			t := d.mono()
			d.mu.Lock()
			// Due packets first, then arrivals: a consumer whose last
			// held packet leaves now holds nothing when its new packets
			// are classified, and they follow it in the same write.
			out = d.dq.popDue(t, out[:0], late)
			for _, ev := range evs[:n] {
				if int(ev.Fd) == d.tfd {
					rawRead(d.tfd, tbuf[:]) // EAGAIN after a re-arm: fine
					armed = 0
					continue
				}
				for {
					pkts, err = d.q.ReadPackets(d.qfd, buf, pkts[:0])
					for j := range pkts {
						out = d.hold(&pkts[j], t, out)
					}
					// Payloads point into buf: used up before the next read.
					if err == nfqueue.ErrSynced {
						synced = true
					}
					if err != nil {
						if err != unix.EAGAIN && !synced {
							d.stats.Errors++
						}
						break
					}
				}
			}
			d.accept(out)
			by := d.drainBy.Load()
			if synced || by != 0 && t >= by {
				// Whatever is still held (a drain cut short) leaves now:
				// the kernel drops what is queued when the socket closes.
				d.accept(d.dq.drainAll(out[:0]))
				d.mu.Unlock()
				return true
			}
			next, ok := d.dq.next()
			if by != 0 && (!ok || by < next) {
				next, ok = by, true
			}
			d.mu.Unlock()
			if ok && next != armed && rawTimerfdSet(d.tfd, next) == nil {
				armed = next
			}
		}
	})
}

// pollSet makes the timerfd and an epoll set of it and the queue's
// socket; the set goes into Go's netpoller as ep.
func pollSet(qfd int) (tfd, epfd int, ep *os.File, err error) {
	if tfd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK); err != nil {
		return -1, -1, nil, fmt.Errorf("timerfd: %w", err)
	}
	if epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err == nil {
		for _, fd := range []int{qfd, tfd} {
			if err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
				break
			}
		}
	}
	if err == nil {
		// Non-blocking, so os.NewFile registers it with the netpoller.
		err = unix.SetNonblock(epfd, true)
	}
	if err != nil {
		unix.Close(tfd)
		if epfd >= 0 {
			unix.Close(epfd)
		}
		return -1, -1, nil, fmt.Errorf("epoll: %w", err)
	}
	return tfd, epfd, os.NewFile(uintptr(epfd), "delayline-epoll"), nil
}

// The loop's per-packet system calls bypass the runtime's bookkeeping
// (see nfqueue.rawRecv): none of them blocks.

func rawEpollWait(epfd int, evs []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawRead(fd int, b []byte) {
	unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
}

// rawTimerfdSet arms fd for the absolute CLOCK_MONOTONIC time due (ns).
func rawTimerfdSet(fd int, due int64) error {
	its := unix.ItimerSpec{Value: unix.NsecToTimespec(max(due, 1))}
	_, _, e := unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(fd), unix.TFD_TIMER_ABSTIME, uintptr(unsafe.Pointer(&its)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// hold queues p, or appends it to now if it passes at once; at the queue
// limit it appends the packet due soonest instead. d.mu must be held. It
// is one function because it is one packet's path through the delay line
// (kind, follow, FIFO, queue limit), read in the order it
// happens, on the hot path.
func (d *DelayLine) hold(p *nfqueue.Packet, t int64, now []uint32) []uint32 {
	dst, port, kind := classifyPacket(p.Payload)
	if !d.cfg.Follow {
		// Without follow, one FIFO per consumer: the delay line as
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
	if kind == kindAck && d.cfg.WriteOn == WriteOnReplies {
		// The rules keep pure ACKs out; one that matches anyway (IPv6
		// extension headers move the offsets the u32 tests read) passes
		// like its kin, ahead of held replies, which TCP takes as it
		// takes any ACK sent before a segment it follows.
		return append(now, p.ID)
	}
	c := d.counter(dst)
	delay := s.ReadDelay
	switch {
	case kind == kindAck:
		delay = s.WriteDelay
	case kind == kindSynAck, d.cfg.WriteOn == WriteOnReplies:
		delay = max(s.ReadDelay, s.WriteDelay)
	}
	flow := netip.AddrPortFrom(dst, port)
	var r *follow
	var ack uint32
	if d.cfg.Follow {
		ack = tcpAckNumber(p.Payload)
		d.sweepFlows(t)
		if r = d.flows[flow]; r == nil {
			// A new connection takes its consumer's delays at once
			// (follow.limit passes its SYN-ACK): its first RTT sample
			// already holds them, and starting it undelayed lets a
			// throttled writer's new login dump its queue on the disk
			// (lab: p95 1.6 × the threshold).
			r = &follow{}
			d.flows[flow] = r
		}
		delay = r.limit(kind, delay, t, ack)
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
	} else {
		now = append(now, p.ID)
	}
	if d.cfg.Follow {
		r.held(kind, t, due, ack)
	}
	return now
}
