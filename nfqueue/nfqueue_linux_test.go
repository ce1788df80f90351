package nfqueue

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
	"golang.org/x/sys/unix"
)

// testNetns creates a throwaway network namespace (name prefixed sqt) with
// lo up, deleted when the test ends whatever happens.
func testNetns(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "iptables")
	b := make([]byte, 4)
	rand.Read(b)
	name := "sqtq" + hex.EncodeToString(b)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// inNetns runs fn on an OS thread moved into the named namespace. The
// thread is never unlocked, so the runtime discards it afterwards and no
// other goroutine ever runs in the wrong namespace. Sockets opened by fn
// stay in that namespace for their whole life.
func inNetns(t *testing.T, name string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestQueueRoundTrip sends UDP datagrams through an iptables NFQUEUE rule,
// checks the queued headers, accepts them, and sees them delivered.
// It is one function because its checks run in order on one bound queue
// and one socket pair in one namespace, each leaving the queue empty for
// the next.
func TestQueueRoundTrip(t *testing.T) {
	ns := testNetns(t)
	const queue = 4242
	run(t, "ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-p", "udp", "--dport", "9999",
		"-j", "NFQUEUE", "--queue-num", fmt.Sprint(queue))

	var (
		q    *Conn
		rx   *net.UDPConn
		tx   *net.UDPConn
		addr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9999}
	)
	inNetns(t, ns, func() (err error) {
		if q, err = Open(Config{Queue: queue, Flags: FlagFailOpen, MaxLen: 64}); err != nil {
			return err
		}
		if rx, err = net.ListenUDP("udp4", addr); err != nil {
			return err
		}
		tx, err = net.DialUDP("udp4", nil, addr)
		return err
	})
	t.Cleanup(func() { q.Close(); rx.Close(); tx.Close() })

	// Binding a queue someone holds must fail, not steal it.
	inNetns(t, ns, func() error {
		if q2, err := Open(Config{Queue: queue}); err == nil {
			q2.Close()
			return fmt.Errorf("second bind of queue %d succeeded", queue)
		}
		return nil
	})

	big := bytes.Repeat([]byte("x"), 1000)
	for i, msg := range [][]byte{[]byte("hello"), big} {
		if _, err := tx.Write(msg); err != nil {
			t.Fatal(err)
		}
		q.SetReadDeadline(time.Now().Add(5 * time.Second))
		pkts, err := q.Receive()
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if len(pkts) != 1 {
			t.Fatalf("receive %d: %d packets", i, len(pkts))
		}
		p := pkts[0]
		if p.HWProtocol != 0x0800 || p.Hook != 3 /* NF_INET_LOCAL_OUT */ {
			t.Fatalf("packet %d: hwproto %#x hook %d", i, p.HWProtocol, p.Hook)
		}
		ip := p.Payload
		if len(ip) < 28 || ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP {
			t.Fatalf("packet %d: not IPv4/UDP: %x", i, ip)
		}
		if dport := binary.BigEndian.Uint16(ip[22:]); dport != 9999 {
			t.Fatalf("packet %d: dport %d", i, dport)
		}
		if want := 28 + len(msg); p.Len() != want {
			t.Fatalf("packet %d: Len %d, want %d", i, p.Len(), want)
		}
		if want := min(28+len(msg), DefaultCopyRange); len(ip) != want {
			t.Fatalf("packet %d: copied %d bytes, want %d", i, len(ip), want)
		}
		if err := q.SetVerdict(p.ID, Accept); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2000)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("packet %d not delivered after accept: %v", i, err)
		}
		if !bytes.Equal(buf[:n], msg) {
			t.Fatalf("packet %d delivered corrupted", i)
		}
	}

	// Several packets held at once, released with one batch verdict, are
	// delivered in order.
	for i := range 5 {
		tx.Write([]byte{byte(i)})
	}
	var ids []uint32
	for len(ids) < 5 {
		q.SetReadDeadline(time.Now().Add(5 * time.Second))
		pkts, err := q.Receive()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			ids = append(ids, p.ID)
		}
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			t.Fatalf("ids not consecutive: %v", ids)
		}
	}
	if err := q.SetVerdictBatch(ids[4], Accept); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		buf := make([]byte, 16)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := rx.Read(buf)
		if err != nil || n != 1 || buf[0] != byte(i) {
			t.Fatalf("batch-accepted datagram %d: n=%d err=%v data=%x", i, n, err, buf[:n])
		}
	}

	// Multi-message verdicts in one sendmsg.
	for i := range 3 {
		tx.Write([]byte{byte(10 + i)})
	}
	ids = ids[:0]
	for len(ids) < 3 {
		q.SetReadDeadline(time.Now().Add(5 * time.Second))
		pkts, err := q.Receive()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			ids = append(ids, p.ID)
		}
	}
	if err := q.SetVerdicts(ids, Accept); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		buf := make([]byte, 16)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := rx.Read(buf)
		if err != nil || n != 1 || buf[0] != byte(10+i) {
			t.Fatalf("datagram %d: n=%d err=%v", 10+i, n, err)
		}
	}

	// A verdict for an id the kernel does not hold comes back as an error
	// on the reader, which stays usable.
	if err := q.SetVerdict(ids[2]+1000, Accept); err != nil {
		t.Fatal(err)
	}
	q.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := q.Receive(); err == nil || IsTimeout(err) {
		t.Fatalf("bad verdict: got err %v, want ENOENT", err)
	}

	// The sync barrier comes back behind packets queued before it.
	tx.Write([]byte("last"))
	if err := q.Sync(); err != nil {
		t.Fatal(err)
	}
	var last []uint32
	for {
		q.SetReadDeadline(time.Now().Add(5 * time.Second))
		pkts, err := q.Receive()
		for _, p := range pkts {
			last = append(last, p.ID)
		}
		if err == ErrSynced {
			break
		}
		if err != nil {
			t.Fatalf("waiting for barrier: %v", err)
		}
	}
	if len(last) != 1 {
		t.Fatalf("barrier overtook or duplicated packets: %v", last)
	}
	q.SetVerdict(last[0], Accept)

	q.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := q.Receive(); !IsTimeout(err) {
		t.Fatalf("idle receive: %v, want timeout", err)
	}
}
