// Package version holds the build's version, set by the linker
// (-X github.com/sanqos/sanqos/internal/version.Version=...).
package version

import "runtime/debug"

// Version is overridden at link time by `make`.
var Version = "dev"

// String returns the version with the VCS revision when known.
func String() string {
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}
