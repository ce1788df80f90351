package pkgdeb

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	// git describe --tags --always --dirty: TAG[-N-gHASH][-dirty], or
	// HASH[-dirty] in a repository without tags.
	describeSuffix = regexp.MustCompile(`-([0-9]+)-g([0-9a-f]{4,40})$`)
	bareHash       = regexp.MustCompile(`^[0-9a-f]{4,40}$`)
	// An upstream version without a Debian revision: no hyphen, no colon.
	debianVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)
)

// DebianVersion turns the version `sanqos version` reports (the Makefile's
// git describe) into a Debian version that sorts as the builds do:
//
//	v1.2.3                  1.2.3
//	v1.2.3-rc1              1.2.3~rc1          (before 1.2.3)
//	v1.2.3-4-gabcdef0       1.2.3+git4.abcdef0 (after 1.2.3, before 1.2.4)
//	abcdef0 (no tag yet)    0~git.abcdef0      (before any release)
//	...-dirty               ...+dirty          (after the clean build)
//
// "dev" (a build without make) and anything else are refused: a package
// whose version means nothing cannot be upgraded sensibly.
func DebianVersion(v string) (string, error) {
	s, dirty := strings.CutSuffix(v, "-dirty")
	var out string
	switch {
	case bareHash.MatchString(s) && !strings.HasPrefix(v, "v"):
		out = "0~git." + s
	default:
		tag, ahead, hash := s, "", ""
		if m := describeSuffix.FindStringSubmatch(s); m != nil {
			tag, ahead, hash = s[:len(s)-len(m[0])], m[1], m[2]
		}
		// A hyphen in a tag is a pre-release (semver), which sorts
		// before the release: Debian's tilde.
		out = strings.ReplaceAll(strings.TrimPrefix(tag, "v"), "-", "~")
		if ahead != "" {
			out += "+git" + ahead + "." + hash
		}
	}
	if dirty {
		out += "+dirty"
	}
	if !debianVersion.MatchString(out) {
		return "", fmt.Errorf("version %q (from sanqos version) makes no Debian version (%q): build with make, from a git checkout, or set VERSION=1.2.3", v, out)
	}
	return out, nil
}

// debArch is Debian's name of a Go architecture, for the architectures
// Debian and Go share. arm is taken as armhf (ARMv7 with VFP), on which a
// Go binary of any GOARM runs.
func debArch(goos, goarch string) (string, error) {
	if goos != "linux" {
		return "", fmt.Errorf("the binary is for %s, not linux", goos)
	}
	arch, ok := map[string]string{
		"amd64": "amd64", "arm64": "arm64", "386": "i386", "arm": "armhf",
		"ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64",
		"mips64le": "mips64el", "loong64": "loong64",
	}[goarch]
	if !ok {
		return "", fmt.Errorf("no Debian architecture for GOARCH=%s", goarch)
	}
	return arch, nil
}
