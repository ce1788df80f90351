package guestenv

import "testing"

func TestAccelOf(t *testing.T) {
	for _, tc := range []struct{ cmdline, want string }{
		{"console=ttyS0 panic=-1 rdinit=/init loglevel=4 sanqos.accel=tcg\n", "tcg"},
		{"sanqos.accel=kvm quiet", "kvm"},
		{"BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro", ""},
		{"xsanqos.accel=tcg", ""},
	} {
		if got := accelOf(tc.cmdline); got != tc.want {
			t.Errorf("accelOf(%q) = %q, want %q", tc.cmdline, got, tc.want)
		}
	}
}
