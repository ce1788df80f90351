// Package packaging holds what `make install` and the Debian package put
// on a host besides the binary: the systemd unit sanqos.service, and in
// deb/ the package's maintainer scripts and the head of its copyright
// file (internal/pkgdeb builds the package and tests them). It has no
// code; its tests check the unit with systemd-analyze, run the agent
// under the unit's sandbox rebuilt without systemd (capabilities, seccomp
// filters, mount namespace) with every backend the kernel has, and run
// `make uninstall`.
//
// Imports (sanqos): none.
package packaging
