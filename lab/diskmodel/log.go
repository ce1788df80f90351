package diskmodel

import (
	"bufio"
	"encoding/binary"
	"io"
	"os"
	"sort"
	"time"
)

// The queue's log: at each admission, the request's arrival and the time
// the server will have served everything queued by then, so the queue at
// any instant of a run can be told afterwards (the first second's floor
// of a load step: how long the I/O already queued when the controller
// first acted kept the reader waiting). Records are two little-endian
// int64 Unix nanoseconds, in time order (admissions are serialised), so a
// reader finds a window by binary search without reading the whole file.

const recordSize = 16

// Record is one admission: its arrival and when the server is then free.
type Record struct{ At, Free time.Time }

// LogTo writes every later admission to w, buffered (Flush writes out).
func (d *Disk) LogTo(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = bufio.NewWriterSize(w, 64<<10)
}

// Flush writes out the buffered records.
func (d *Disk) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.log == nil {
		return nil
	}
	return d.log.Flush()
}

// logAdmit records an admission; d.mu is held. A write error drops the
// log, never the request.
func (d *Disk) logAdmit(at time.Time) {
	if d.log == nil {
		return
	}
	var b [recordSize]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(at.UnixNano()))
	binary.LittleEndian.PutUint64(b[8:], uint64(d.free.UnixNano()))
	if _, err := d.log.Write(b[:]); err != nil {
		d.log = nil
	}
}

// ReadLog returns the records of path with arrivals in [from, to], and
// the one before from (the queue at from is that record's).
func ReadLog(path string, from, to time.Time) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	n := int(st.Size() / recordSize)
	var b [recordSize]byte
	read := func(i int) (Record, error) {
		if _, err := f.ReadAt(b[:], int64(i)*recordSize); err != nil {
			return Record{}, err
		}
		return Record{time.Unix(0, int64(binary.LittleEndian.Uint64(b[:8]))), time.Unix(0, int64(binary.LittleEndian.Uint64(b[8:])))}, nil
	}
	var rerr error
	first := sort.Search(n, func(i int) bool {
		r, err := read(i)
		if err != nil {
			rerr = err
			return true
		}
		return !r.At.Before(from)
	})
	if rerr != nil {
		return nil, rerr
	}
	var out []Record
	for i := max(0, first-1); i < n; i++ {
		r, err := read(i)
		if err != nil {
			return nil, err
		}
		if r.At.After(to) {
			break
		}
		out = append(out, r)
	}
	return out, nil
}
