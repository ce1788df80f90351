package sample

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sampler's per-tick reads and writes (sock_diag requests and
// replies on a non-blocking socket, /proc/diskstats) are issued as raw
// system calls, without telling the runtime. They never wait: the
// socket is non-blocking and the kernel answers sock_diag inside the
// send, and a proc file is generated in the read. Through the runtime's
// syscall path, the first of them each tick found the runtime's monitor
// thread (sysmon) in its deep sleep between ticks and woke it with a
// reset backoff, so it polled every 20 µs for as long as the tick ran:
// ~21 % of the control loop's CPU in the lab profile, more than the
// lookups cost the kernel. Only calls that cannot block belong here.

func rawWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

func rawPread(fd int, b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(off), 0, 0)
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}
