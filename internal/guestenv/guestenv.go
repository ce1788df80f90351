// Package guestenv tells a process whether it runs in the stock-kernel
// tier's QEMU guest (lab/guest), and under which accelerator. The guest
// boots with sanqos.accel=tcg or kvm on its kernel command line, so every
// process in it — the lab, the agents, tests compiled on the host and run
// there — can read it from /proc/cmdline without an environment passed
// along. It reads; it must not touch anything.
//
// Imports (sanqos): none.
package guestenv

import (
	"os"
	"strings"
)

// Key is the kernel command-line parameter the guest boots with.
const Key = "sanqos.accel"

// Accel returns the accelerator of the QEMU guest this process runs in
// ("tcg", "kvm"), or "" on the host.
func Accel() string {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return ""
	}
	return accelOf(string(b))
}

func accelOf(cmdline string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, Key+"="); ok {
			return v
		}
	}
	return ""
}

// Emulated reports whether this process runs on an emulated CPU (TCG),
// where timing is the emulator's, not the hardware's.
func Emulated() bool { return Accel() == "tcg" }
