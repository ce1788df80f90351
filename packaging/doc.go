// Package packaging holds what `make install` puts on a host besides the
// binary: the systemd unit sanqos.service. It has no code; its tests
// check the unit with systemd-analyze, run the agent under the unit's
// sandbox rebuilt without systemd (capabilities, seccomp filters, mount
// namespace) with every backend the kernel has, and run `make
// uninstall`.
package packaging
