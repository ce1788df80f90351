// Command sanqos-pkg builds sanqos' Debian package from a built binary;
// `make deb` builds the binary and runs it:
//
//	CGO_ENABLED=0 go build -ldflags '-X .../version.Version=v1.2.3' -o bin/deb/sanqos ./cmd/sanqos
//	go run ./cmd/sanqos-pkg -binary bin/deb/sanqos -out bin
//
// It prints the package's path. See internal/pkgdeb for what goes in.
//
// Imports (sanqos): internal/pkgdeb.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sanqos/sanqos/internal/pkgdeb"
)

func main() {
	o := pkgdeb.Options{}
	flag.StringVar(&o.Binary, "binary", "bin/deb/sanqos", "the sanqos binary to package (static, for this host's architecture)")
	flag.StringVar(&o.Source, "source", ".", "the source tree's root")
	flag.StringVar(&o.OutDir, "out", "bin", "directory to write sanqos_VERSION_ARCH.deb into")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	// SOURCE_DATE_EPOCH (reproducible-builds.org): `make deb` sets it to
	// the commit's time, so a package rebuilt from one commit is the same.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fail(fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err))
		}
		o.MTime = time.Unix(sec, 0).UTC()
	}
	p, err := pkgdeb.Build(o)
	if err != nil {
		fail(err)
	}
	fmt.Println(p)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sanqos-pkg:", err)
	os.Exit(1)
}
