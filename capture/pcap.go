package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Pcap files hold what a capture saw, for replay in tests and offline
// diagnosis: the classic libpcap format with LINKTYPE_RAW (packets start
// at the IP header, as a cooked AF_PACKET socket delivers them) and
// nanosecond timestamps.
const (
	pcapMagicNs = 0xa1b23c4d
	linktypeRaw = 101
)

// PcapWriter writes packets to a pcap stream.
type PcapWriter struct {
	w   *bufio.Writer
	hdr [16]byte
}

// NewPcapWriter writes the file header.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	pw := &PcapWriter{w: bufio.NewWriter(w)}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagicNs)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], bufSize)
	binary.LittleEndian.PutUint32(h[20:], linktypeRaw)
	_, err := pw.w.Write(h[:])
	return pw, err
}

// Write appends one packet (starting at its IP header).
func (pw *PcapWriter) Write(pkt []byte, ts time.Time) error {
	binary.LittleEndian.PutUint32(pw.hdr[0:], uint32(ts.Unix()))
	binary.LittleEndian.PutUint32(pw.hdr[4:], uint32(ts.Nanosecond()))
	binary.LittleEndian.PutUint32(pw.hdr[8:], uint32(len(pkt)))
	binary.LittleEndian.PutUint32(pw.hdr[12:], uint32(len(pkt)))
	if _, err := pw.w.Write(pw.hdr[:]); err != nil {
		return err
	}
	_, err := pw.w.Write(pkt)
	return err
}

// Flush writes buffered packets out.
func (pw *PcapWriter) Flush() error { return pw.w.Flush() }

// ReadPcap calls fn with every packet of a pcap stream written by
// PcapWriter (nanosecond, LINKTYPE_RAW, little-endian). The packet is
// valid only during the call.
func ReadPcap(r io.Reader, fn func(pkt []byte, ts time.Time)) error {
	br := bufio.NewReader(r)
	var h [24]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return fmt.Errorf("pcap header: %w", err)
	}
	if binary.LittleEndian.Uint32(h[0:]) != pcapMagicNs || binary.LittleEndian.Uint32(h[20:]) != linktypeRaw {
		return errors.New("pcap: want little-endian nanosecond LINKTYPE_RAW (as PcapWriter writes)")
	}
	buf := make([]byte, bufSize)
	var rh [16]byte
	for {
		if _, err := io.ReadFull(br, rh[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("pcap record: %w", err)
		}
		n := binary.LittleEndian.Uint32(rh[8:])
		if n > bufSize {
			return fmt.Errorf("pcap record of %d bytes", n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return fmt.Errorf("pcap record: %w", err)
		}
		fn(buf[:n], time.Unix(int64(binary.LittleEndian.Uint32(rh[0:])), int64(binary.LittleEndian.Uint32(rh[4:]))))
	}
}
