// Package nsforward forwards TCP connections from this network namespace
// to an address inside another one. The lab's agent serves its dashboard
// on 127.0.0.1:9311 inside the target namespace (bm), which a browser in
// the root namespace cannot reach; `sanqos-lab lab dashboard` bridges it.
//
// It only moves bytes: it must not parse or change what it forwards, and
// it never changes the namespace of any thread but the one that dials.
//
// Imports (sanqos): none.
package nsforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Dial connects to addr (TCP) from inside the network namespace at nsPath
// (/run/netns/NAME or /proc/PID/ns/net). The socket stays in that
// namespace after the dialling thread is gone.
func Dial(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is left locked on purpose: its namespace is changed,
		// and Go ends a thread whose goroutine exits while locked instead
		// of reusing it for other goroutines.
		runtime.LockOSThread()
		f, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// Serve accepts on l and joins each connection to a new one to addr in
// the namespace at nsPath, until ctx ends. A failed dial (the agent is
// restarting between experiment phases) closes that one connection only;
// the browser's EventSource retries by itself.
func Serve(ctx context.Context, l net.Listener, nsPath, addr string, log *slog.Logger) error {
	go func() { <-ctx.Done(); l.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			up, err := Dial(ctx, nsPath, addr)
			if err != nil {
				log.Warn("forward: dial failed", "ns", nsPath, "addr", addr, "err", err)
				return
			}
			defer up.Close()
			stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
			defer stop()
			done := make(chan struct{})
			go func() { io.Copy(up, c); closeWrite(up); close(done) }()
			io.Copy(c, up)
			closeWrite(c)
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		t.CloseWrite()
	}
}
