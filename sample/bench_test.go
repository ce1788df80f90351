package sample

import (
	"net"
	"testing"
)

// loopbackConns opens n established loopback connections to one listener
// and returns its port; cleanup closes them.
func loopbackConns(tb testing.TB, n int) (port uint16, clients []net.Conn) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, n)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			tb.Fatal(err)
		}
		clients = append(clients, c)
		s := <-accepted
		tb.Cleanup(func() { c.Close(); s.Close() })
	}
	return uint16(l.Addr().(*net.TCPAddr).Port), clients
}

// One tick's TCP_INFO sample of 16 connections (the lab's autonomic load:
// four initiators' sessions plus twelve writers'), nine exact lookups in
// ten and one dump, against the kernel.
func BenchmarkTCPRatesSample(b *testing.B) {
	port, _ := loopbackConns(b, 16)
	tr := NewTCPRates(port)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Sample(); err != nil {
			b.Fatal(err)
		}
	}
}

// One tick's /proc/diskstats read, from the fixture captured on the lab
// machine (ten devices).
func BenchmarkDiskstatsRead(b *testing.B) {
	d, err := NewDiskstats("testdata/proc", "testdata/sys")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
