package testenv

import (
	"compress/gzip"
	"io"
	"os"
	"testing"
)

// Gunzip opens a gzipped fixture (a lab trace, a pcap) for reading,
// closed when t ends; any error fails t.
func Gunzip(t testing.TB, path string) io.Reader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return zr
}
