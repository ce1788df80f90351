package nfqueue

import (
	"encoding/binary"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the delay line's per-packet path on a Conn's socket
// (see the package comment): ReadPackets and WriteVerdicts, one raw
// system call per datagram or batch, no allocation and no goroutine. It
// is its own file because it bypasses mdlayher/netlink and the Go
// runtime's system call bookkeeping, which nfqueue.go's Receive and
// SetVerdicts rely on.

// FD is the socket's file descriptor, for poll(2) and for ReadPackets and
// WriteVerdicts. It stays owned by the Conn and is valid until Close.
func (c *Conn) FD() (int, error) {
	rc, err := c.nl.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// ReadPackets reads one datagram from fd (from FD) without blocking and
// appends its packets to pkts. Their Payloads point into buf, which must
// hold a whole datagram (a packet message is CopyRange plus ~100 bytes);
// they are valid until buf is reused. It returns unix.EAGAIN when nothing
// is waiting, ErrSynced (with the packets before it) when the barrier sent
// by Sync comes back, and a kernel error message as an error.
func (c *Conn) ReadPackets(fd int, buf []byte, pkts []Packet) ([]Packet, error) {
	n, err := rawRecv(fd, buf)
	if err != nil {
		return pkts, err
	}
	b := buf[:n]
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b))
		typ := binary.NativeEndian.Uint16(b[4:])
		seq := binary.NativeEndian.Uint32(b[8:])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return pkts, errors.New("nfqueue: truncated netlink message")
		}
		if pkts, err = c.take(pkts, typ, seq, b[unix.NLMSG_HDRLEN:l]); err != nil {
			return pkts, err
		}
		b = b[min(nlmsgAlign(l), len(b)):]
	}
	return pkts, nil
}

// rawRecv and rawWrite skip the Go runtime's system call bookkeeping
// (entersyscall), which is for calls that may block: these never do (the
// socket is non-blocking, and the kernel handles a verdict at once), and
// the bookkeeping wakes the runtime's sysmon thread whenever every P was
// idle, i.e. on every packet of a delay line that waits in the netpoller.
func rawRecv(fd int, buf []byte) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd int, b []byte) error {
	_, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return e
	}
	return nil
}

// WriteVerdicts gives each packet in ids verdict v with one write(2) on fd
// (from FD); the kernel handles them in order, so the packets leave in the
// order of ids. buf is scratch space, returned for reuse.
func (c *Conn) WriteVerdicts(fd int, buf []byte, ids []uint32, v Verdict) ([]byte, error) {
	if len(ids) == 0 {
		return buf, nil
	}
	buf = buf[:0]
	for _, id := range ids {
		buf = appendVerdict(buf, c.queue, msgVerdict, id, v)
	}
	for off := 0; off < len(buf); {
		// A netlink write is one datagram: whole or nothing. Past the
		// socket's send buffer it fails with EMSGSIZE, so large batches
		// go in pieces of whole messages.
		end := min(len(buf), off+verdictLen*1024)
		if err := rawWrite(fd, buf[off:end]); err != nil {
			return buf, err
		}
		off = end
	}
	return buf, nil
}
