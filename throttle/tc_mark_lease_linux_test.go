package throttle

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The mark lease's refresher enters the creator's namespace only when its
// thread is elsewhere: in the agent (one namespace) it needs no setns, so
// no CAP_SYS_ADMIN, and the systemd unit may leave that out for a named
// netem or htb backend. Checked on a thread without CAP_SYS_ADMIN:
// entering its own namespace succeeds, entering another is refused.
func TestEnterNSWithoutSysAdmin(t *testing.T) {
	testenv.RequireRoot(t)
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread's reduced capabilities and namespace
		// go with it when the goroutine ends.
		runtime.LockOSThread()
		errc <- func() error {
			own, err := netns.Get()
			if err != nil {
				return err
			}
			defer own.Close()
			other, err := netns.New()
			if err != nil {
				return fmt.Errorf("scratch namespace: %w", err)
			}
			defer other.Close()
			if err := netns.Set(own); err != nil {
				return err
			}
			if err := dropThreadCap(unix.CAP_SYS_ADMIN); err != nil {
				return err
			}
			if err := enterNS(own); err != nil {
				return fmt.Errorf("own namespace without CAP_SYS_ADMIN: %w", err)
			}
			if err := enterNS(other); !errors.Is(err, unix.EPERM) {
				return fmt.Errorf("another namespace without CAP_SYS_ADMIN: %v, want EPERM (the check is void)", err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// dropThreadCap removes c from the calling thread's effective set
// (capset(2) acts on the calling thread only).
func dropThreadCap(c int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[c/32].Effective &^= 1 << (c % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
