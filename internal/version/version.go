// Package version holds the build's version, set by the linker
// (-X github.com/sanqos/sanqos/internal/version.Version=...).
//
// Imports (sanqos): none.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is overridden at link time by `make`.
var Version = "dev"

// Commit is the full git revision, set at link time by `make`. Go's own
// record (vcs.revision) is used when it is empty, but that is missing
// from builds with -buildvcs=false and from builds outside a checkout.
var Commit = ""

// Info is what `sanqos version --json` prints, and what the Debian
// package builder reads its version from.
type Info struct {
	Version string `json:"version"`
	// Commit is the full revision, or "" when the build did not record one.
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// Get returns this binary's build information.
func Get() Info {
	return Info{Version: Version, Commit: commit(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
}

func commit() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// String returns the version with the VCS revision when known.
func String() string {
	v := Version
	if c := commit(); len(c) >= 12 {
		v += " (" + c[:12] + ")"
	}
	return v
}
