package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/internal/guestenv"
)

// GuestCmdlineKey is the kernel command-line parameter the stock-kernel
// tier's QEMU guest (lab/guest) boots with: sanqos.accel=tcg or kvm.
const GuestCmdlineKey = guestenv.Key

// GuestAccel returns the accelerator of the QEMU guest this process runs
// in ("tcg", "kvm"), or "" on the host.
func GuestAccel() string { return guestenv.Accel() }

// Slowdown is how much longer the lab's waits for outside processes
// (tgtd's socket, the disk model's mounts, an agent's socket) may take
// here than on the host: 15× in a TCG guest, where every program runs
// 10–30× slower than natively; 1 elsewhere. It stretches timeouts only,
// never the experiments' own durations.
func Slowdown() time.Duration {
	if guestenv.Emulated() {
		return 15
	}
	return 1
}

// kernelRelease is `uname -r`.
func kernelRelease() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return ""
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// withGuestFields puts "accelerator" and "kernel" first in an indented
// JSON object when accel (GuestAccel) is set, so a summary made in the
// stock-kernel guest says which tier produced it; on the host (accel "")
// it returns b unchanged.
func withGuestFields(b []byte, accel, kernel string) []byte {
	if accel == "" || !bytes.HasPrefix(b, []byte("{")) {
		return b
	}
	head := fmt.Sprintf("{\n  %q: %q,\n  %q: %q", "accelerator", accel, "kernel", kernel)
	rest := bytes.TrimSpace(b[1:])
	if !bytes.Equal(rest, []byte("}")) {
		head += ","
	}
	return append([]byte(head+"\n  "), rest...)
}

// DirectIOFlags is tgt's --bsoflags for a backing store: "direct" where
// the file takes O_DIRECT, none where it does not (tmpfs before Linux 6.6,
// the RAM LUN on the stock kernel), with a note why.
func DirectIOFlags(path string) (flags []string, note string) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err == nil {
		f.Close()
		return []string{"--bsoflags", "direct"}, ""
	}
	if errors.Is(err, syscall.EINVAL) {
		return nil, fmt.Sprintf("%s takes no O_DIRECT on kernel %s (tmpfs has it since 6.6): tgtd opens it buffered", path, kernelRelease())
	}
	// Any other failure is tgtd's to report, with the flag as always.
	return []string{"--bsoflags", "direct"}, ""
}
