package pdutrack

// Buffer is one stream direction's state between calls: at most its
// capacity of bytes (a partial header, or a header awaiting confirmation)
// and a count of data bytes still to skip. Data is skipped, never
// buffered.
type Buffer struct {
	Buf     []byte
	Skip    int
	Synced  bool // the last header was accepted in sequence
	Resyncs int  // bytes dropped while looking for a header
}

// NewBuffer holds up to size bytes.
func NewBuffer(size int) Buffer { return Buffer{Buf: make([]byte, 0, size), Synced: true} }

// Feed consumes p, running parse each time the buffer took bytes, and
// returns the bytes dropped resynchronising.
func (s *Buffer) Feed(p []byte, parse func()) (resyncs int) {
	before := s.Resyncs
	for len(p) > 0 {
		if s.Skip > 0 && len(s.Buf) == 0 {
			n := min(s.Skip, len(p))
			s.Skip -= n
			p = p[n:]
			continue
		}
		n := min(cap(s.Buf)-len(s.Buf), len(p))
		s.Buf = append(s.Buf, p[:n]...)
		p = p[n:]
		parse()
	}
	return s.Resyncs - before
}

// Parse consumes the buffer: past the data to skip, while at least least
// bytes are there, step takes a header at the front and says how long it
// is (0: wait for more bytes) and how much data follows it to skip, or
// drops one byte (Resync).
func (s *Buffer) Parse(least int, step func(b []byte) (hdr, skip int)) {
	b := s.Buf
	for {
		if s.Skip > 0 {
			n := min(s.Skip, len(b))
			s.Skip -= n
			b = b[n:]
			if s.Skip > 0 {
				break
			}
		}
		if len(b) < least {
			break
		}
		hdr, skip := step(b)
		if hdr == 0 {
			break
		}
		b, s.Skip = b[hdr:], skip
	}
	// What is left is always shorter than the buffer (a partial header,
	// or a candidate and less than its successor), so Feed always makes
	// progress.
	s.Buf = s.Buf[:copy(s.Buf[:cap(s.Buf)], b)]
}

// Resync gives up the first byte: no header starts there.
func (s *Buffer) Resync() (hdr, skip int) {
	s.Synced = false
	s.Resyncs++
	return 1, 0
}

// Gap forgets the partial header and the data to skip: bytes were lost,
// the next header must be found again.
func (s *Buffer) Gap() { s.Buf, s.Skip, s.Synced = s.Buf[:0], 0, false }
