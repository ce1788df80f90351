// Package nfqueue is a thin binding of the kernel's nfnetlink_queue protocol
// (include/uapi/linux/netfilter/nfnetlink_queue.h) on mdlayher/netlink: bind
// one queue, receive the packets an iptables NFQUEUE rule hands to it, and
// give each one a verdict.
//
// Its job is only the wire protocol. It must not decide what to do with a
// packet (that is the delay line's job in package throttle), must not touch
// iptables rules or ipsets, and must never rewrite a packet: sanqos only
// delays traffic, so the only verdict a caller is expected to send is
// Accept, and the binding offers no way to send a modified payload.
//
// Two ways to use a Conn. Receive/SetVerdicts go through mdlayher/netlink's
// socket, which waits in Go's netpoller and starts a goroutine per call to
// watch for cancellation; that is fine for setup, tests and low rates. The
// delay line's per-packet path instead calls ReadPackets and WriteVerdicts
// on the same socket: one raw system call per datagram and one per batch
// of verdicts, no allocation and no goroutine. In the lab the netpoller path cost ~250 µs of
// CPU per delayed packet, nearly all of it in the Go scheduler (perf:
// futex wake-ups, finish_task_switch, sysmon).
//
// A queued packet stays in kernel memory until it gets a verdict. Closing
// the socket makes the kernel drop every packet still waiting, so callers
// accept everything they hold, and remove the rule feeding the queue,
// before Close.
//
// Imports (sanqos): none.
package nfqueue

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Protocol constants from include/uapi/linux/netfilter/nfnetlink_queue.h and
// nfnetlink.h. Kept unexported except where callers need them.
const (
	subsysQueue = 3 // NFNL_SUBSYS_QUEUE

	msgPacket       = 0 // NFQNL_MSG_PACKET
	msgVerdict      = 1 // NFQNL_MSG_VERDICT
	msgConfig       = 2 // NFQNL_MSG_CONFIG
	msgVerdictBatch = 3 // NFQNL_MSG_VERDICT_BATCH

	attrPacketHdr  = 1  // NFQA_PACKET_HDR
	attrVerdictHdr = 2  // NFQA_VERDICT_HDR
	attrMark       = 3  // NFQA_MARK
	attrTimestamp  = 4  // NFQA_TIMESTAMP
	attrInDev      = 5  // NFQA_IFINDEX_INDEV
	attrOutDev     = 6  // NFQA_IFINDEX_OUTDEV
	attrPayload    = 10 // NFQA_PAYLOAD
	attrCapLen     = 13 // NFQA_CAP_LEN
	attrSkbInfo    = 14 // NFQA_SKB_INFO

	cfgAttrCmd      = 1 // NFQA_CFG_CMD
	cfgAttrParams   = 2 // NFQA_CFG_PARAMS
	cfgAttrQueueMax = 3 // NFQA_CFG_QUEUE_MAXLEN
	cfgAttrMask     = 4 // NFQA_CFG_MASK
	cfgAttrFlags    = 5 // NFQA_CFG_FLAGS

	cfgCmdBind   = 1 // NFQNL_CFG_CMD_BIND
	cfgCmdUnbind = 2 // NFQNL_CFG_CMD_UNBIND
	cfgCmdPfBind = 3 // NFQNL_CFG_CMD_PF_BIND

	copyPacket = 2 // NFQNL_COPY_PACKET

	nfnetlinkV0 = 0
)

// Queue flags (NFQA_CFG_F_*).
const (
	// FlagFailOpen makes the kernel accept, instead of drop, a packet it
	// cannot queue (queue full, or our socket buffer full). sanqos must
	// never drop storage traffic, so the delay line always sets it.
	FlagFailOpen uint32 = 1 << 0
	// FlagGSO lets the kernel queue GSO super-packets unsegmented. We never
	// look past the headers, so segmenting them in the kernel only costs
	// CPU and multiplies the number of queued packets.
	FlagGSO uint32 = 1 << 2
)

// Verdict is a netfilter verdict (NF_*).
type Verdict uint32

// Accept is NF_ACCEPT: the packet continues through the stack unchanged.
const Accept Verdict = 1

// SkbInfo bits (NFQA_SKB_*).
const (
	SkbCsumNotReady = 1 << 0
	SkbGSO          = 1 << 1
)

// Defaults for Config.
const (
	// DefaultCopyRange covers the largest IPv4 header (60 bytes) plus the
	// largest TCP header (60 bytes): headers are all we inspect, and
	// copying less keeps the per-packet cost independent of the MTU.
	DefaultCopyRange = 128
	// DefaultMaxLen is the kernel's own default queue length.
	DefaultMaxLen = 1024
)

// Config selects and tunes the queue to bind.
type Config struct {
	// Queue is the queue number used by the iptables NFQUEUE rule.
	Queue uint16
	// CopyRange is how many bytes of each packet are copied to us
	// (default DefaultCopyRange).
	CopyRange uint32
	// MaxLen bounds the packets the kernel keeps waiting for a verdict;
	// beyond it the kernel drops, or accepts with FlagFailOpen
	// (default DefaultMaxLen).
	MaxLen uint32
	// Flags are NFQA_CFG_F_* bits to set (FlagFailOpen, FlagGSO).
	Flags uint32
	// ReadBuffer is the socket receive buffer in bytes (0: kernel
	// default). A larger buffer rides out bursts; with FlagFailOpen an
	// overflow accepts the packet undelayed rather than dropping it.
	ReadBuffer int
}

// Packet is one queued packet, as received.
type Packet struct {
	// ID names the packet in a verdict; the kernel numbers packets per
	// queue, increasing by one and wrapping at 2^32.
	ID uint32
	// HWProtocol is the EtherType (0x0800 IPv4, 0x86dd IPv6).
	HWProtocol uint16
	// Hook is the netfilter hook (NF_INET_*) the packet was queued at.
	Hook uint8
	// Mark is the packet's fwmark (0 when unset).
	Mark uint32
	// InDev and OutDev are interface indexes (0 when not known).
	InDev, OutDev uint32
	// Payload is the network-layer packet, at most CopyRange bytes.
	Payload []byte
	// CapLen is the packet's full length when Payload was truncated,
	// else 0; Len gives the full length either way.
	CapLen uint32
	// SkbInfo carries SkbGSO and SkbCsumNotReady bits.
	SkbInfo uint32
}

// Len is the full length of the packet in bytes, even when only its
// headers were copied.
func (p *Packet) Len() int {
	if p.CapLen > 0 {
		return int(p.CapLen)
	}
	return len(p.Payload)
}

// Conn is a netlink socket bound to one queue. Receive must be called from
// one goroutine at a time; verdicts may be sent concurrently with Receive.
type Conn struct {
	nl      *netlink.Conn
	queue   uint16
	syncSeq atomic.Uint32
}

// ErrSynced is returned by Receive when the barrier sent by Sync comes
// back: every packet the kernel queued before Sync was called has been
// returned by an earlier Receive.
var ErrSynced = errors.New("nfqueue: sync barrier reached")

// Open binds the queue in the caller's network namespace and configures it.
// It fails with EBUSY (wrapped) when another socket holds the queue.
func Open(cfg Config) (*Conn, error) {
	cfg.CopyRange = cmp.Or(cfg.CopyRange, DefaultCopyRange)
	cfg.MaxLen = cmp.Or(cfg.MaxLen, DefaultMaxLen)
	// Packet messages are small (CopyRange plus ~100 bytes of attributes);
	// a fixed buffer avoids the peek-then-read double syscall per packet.
	nc, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{MessageBufferSize: 16 << 10})
	if err != nil {
		return nil, fmt.Errorf("nfqueue: dial netfilter netlink: %w", err)
	}
	c := &Conn{nl: nc, queue: cfg.Queue}
	// Without this a full socket buffer surfaces as ENOBUFS from Receive;
	// with FlagFailOpen the kernel has already accepted the packet it
	// could not deliver, so there is nothing for us to recover.
	if err := nc.SetOption(netlink.NoENOBUFS, true); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nfqueue: NETLINK_NO_ENOBUFS: %w", err)
	}
	if cfg.ReadBuffer > 0 {
		if err := nc.SetReadBuffer(cfg.ReadBuffer); err != nil {
			nc.Close()
			return nil, fmt.Errorf("nfqueue: read buffer: %w", err)
		}
	}
	if _, err := nc.Execute(configMessage(cfg.Queue, encodeCmd(cfgCmdBind))); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nfqueue: bind queue %d: %w", cfg.Queue, err)
	}
	if _, err := nc.Execute(configMessage(cfg.Queue, encodeParams(cfg))); err != nil {
		nc.Close()
		return nil, fmt.Errorf("nfqueue: configure queue %d: %w", cfg.Queue, err)
	}
	return c, nil
}

// Queue is the bound queue number.
func (c *Conn) Queue() uint16 { return c.queue }

// Receive blocks for the next datagram and returns the packets in it. An
// error message from the kernel (typically ENOENT for a verdict on a packet
// the kernel no longer holds) comes back as an error; the Conn stays usable.
// IsTimeout tells the error a reader loop must act on.
func (c *Conn) Receive() ([]Packet, error) {
	msgs, err := c.nl.Receive()
	if err != nil {
		return nil, err
	}
	pkts := make([]Packet, 0, len(msgs))
	for _, m := range msgs {
		if pkts, err = c.take(pkts, uint16(m.Header.Type), m.Header.Sequence, m.Data); err != nil {
			return pkts, err
		}
	}
	return pkts, nil
}

// take appends the packet one netlink message carries to pkts. The
// barrier's ack is ErrSynced, a kernel error message an error; other
// messages (acks of other requests) are skipped.
func (c *Conn) take(pkts []Packet, typ uint16, seq uint32, body []byte) ([]Packet, error) {
	switch typ {
	case unix.NLMSG_ERROR:
		if seq != 0 && seq == c.syncSeq.Load() {
			return pkts, ErrSynced
		}
		if len(body) >= 4 {
			if e := int32(binary.NativeEndian.Uint32(body)); e != 0 {
				return pkts, fmt.Errorf("nfqueue: kernel: %w", unix.Errno(-e))
			}
		}
	case subsysQueue<<8 | msgPacket:
		p, err := decodePacket(body)
		if err != nil {
			return pkts, err
		}
		pkts = append(pkts, p)
	}
	return pkts, nil
}

// Sync sends a barrier: a request the kernel acknowledges by appending the
// ack to our socket, behind every packet already queued to it. Once the
// rule feeding the queue is gone, reading until ErrSynced therefore drains
// the queue without guessing a timeout.
func (c *Conn) Sync() error {
	// NFQNL_CFG_CMD_PF_BIND is an obsolete no-op the kernel still acks.
	m, err := c.nl.Send(configMessage(c.queue, encodeCmd(cfgCmdPfBind)))
	if err != nil {
		return err
	}
	c.syncSeq.Store(m.Header.Sequence)
	return nil
}

// SetReadDeadline bounds a blocked or future Receive.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.nl.SetReadDeadline(t) }

// SetVerdict gives one packet its verdict.
func (c *Conn) SetVerdict(id uint32, v Verdict) error {
	_, err := c.nl.Send(verdictMessage(c.queue, msgVerdict, id, v))
	return err
}

// SetVerdicts gives each packet its verdict in one sendmsg: the kernel
// handles the messages in order, so the packets leave in the order of ids.
func (c *Conn) SetVerdicts(ids []uint32, v Verdict) error {
	if len(ids) == 0 {
		return nil
	}
	if len(ids) == 1 {
		return c.SetVerdict(ids[0], v)
	}
	msgs := make([]netlink.Message, len(ids))
	for i, id := range ids {
		msgs[i] = verdictMessage(c.queue, msgVerdict, id, v)
	}
	_, err := c.nl.SendMessages(msgs)
	return err
}

// SetVerdictBatch gives the verdict to every packet still waiting in the
// queue whose id is not after maxID (wrap-aware, as the kernel compares).
// Only correct when the caller holds no packet at or below maxID that
// should wait longer.
func (c *Conn) SetVerdictBatch(maxID uint32, v Verdict) error {
	_, err := c.nl.Send(verdictMessage(c.queue, msgVerdictBatch, maxID, v))
	return err
}

// Close unbinds the queue and closes the socket. The kernel drops packets
// still waiting for a verdict.
func (c *Conn) Close() error {
	// Best effort: closing the socket unbinds too, this only makes it
	// explicit. No ack is requested, so no reader has to collect one.
	m := configMessage(c.queue, encodeCmd(cfgCmdUnbind))
	m.Header.Flags = netlink.Request
	_, _ = c.nl.Send(m)
	return c.nl.Close()
}

// IsTimeout reports whether err is a read deadline expiring.
func IsTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}
