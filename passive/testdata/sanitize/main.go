// Command sanitize makes a lab pcap (sanqos capture --pcap) small enough
// for a test fixture: it zeroes the iSCSI data segments (fio's random
// buffers, which do not compress) and keeps every PDU header byte, the IP
// and TCP headers, and the timing, so the replay is the same to the
// parser. It assumes each direction's first captured byte starts a PDU
// (as the parser does) and leaves a direction raw once its walk meets a
// non-header. Usage: go run ./passive/testdata/sanitize IN.pcap | gzip > OUT.pcap.gz
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/sanqos/sanqos/capture"
)

type walk struct {
	started bool
	next    uint32 // next expected sequence number
	skip    int    // data bytes to zero before the next header
	hdr     []byte // partial header
	need    int    // header length once known
	broken  bool
}

func main() {
	in, err := os.Open(os.Args[1])
	if err != nil {
		panic(err)
	}
	w, err := capture.NewPcapWriter(os.Stdout)
	if err != nil {
		panic(err)
	}
	dirs := map[[2]string]*walk{}
	var until time.Time
	err = capture.ReadPcap(in, func(pkt []byte, ts time.Time) {
		if until.IsZero() {
			until = ts.Add(600 * time.Millisecond) // enough reads of the slow reader
		}
		if ts.After(until) {
			return
		}
		s, ok := capture.Decode(pkt, ts)
		if ok && len(s.Payload) > 0 {
			k := [2]string{s.Src.String(), s.Dst.String()}
			d := dirs[k]
			if d == nil {
				d = &walk{}
				dirs[k] = d
			}
			if !d.started {
				d.started, d.next = true, s.Seq
			}
			if s.Seq == d.next && !d.broken {
				d.feed(s.Payload)
				d.next += uint32(len(s.Payload))
			}
		}
		w.Write(pkt, ts)
	})
	if err != nil {
		panic(err)
	}
	w.Flush()
	for k, d := range dirs {
		if d.broken {
			fmt.Fprintf(os.Stderr, "%v: left raw after a non-header\n", k)
		}
	}
}

// feed zeroes data bytes in p in place and keeps headers.
func (d *walk) feed(p []byte) {
	for len(p) > 0 && !d.broken {
		if d.skip > 0 {
			n := min(d.skip, len(p))
			clear(p[:n])
			d.skip -= n
			p = p[n:]
			continue
		}
		want := 48
		if d.need > 0 {
			want = d.need
		}
		n := min(want-len(d.hdr), len(p))
		d.hdr = append(d.hdr, p[:n]...)
		p = p[n:]
		if len(d.hdr) < want {
			continue
		}
		if d.need == 0 {
			if d.hdr[0]&0x80 != 0 {
				d.broken = true
				return
			}
			d.need = 48 + int(d.hdr[4])*4
			if d.need > 48 {
				continue
			}
		}
		dsl := int(d.hdr[5])<<16 | int(d.hdr[6])<<8 | int(d.hdr[7])
		d.skip = (dsl + 3) &^ 3
		d.hdr, d.need = d.hdr[:0], 0
	}
}
