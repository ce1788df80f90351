package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"time"
)

// The lab's etcd server (Debian's etcd-server) for cluster control: it
// runs when the lab has more than one target host, in the switch
// namespace, listening on the bridge's own address so that every target
// host's agent reaches it over the lab network. Its data lives under
// StateDir (tmpfs), so Down removes it with the rest.
var EtcdAddr = netip.MustParseAddr(subnet + "250")

const etcdClientPort = 2379

// EtcdURL is the lab etcd's client URL (for `sanqos agent --etcd`).
func EtcdURL() string { return fmt.Sprintf("http://%s:%d", EtcdAddr, etcdClientPort) }

func etcdDataDir() string { return filepath.Join(StateDir, "etcd") }

// EtcdLog is the lab etcd's log (kept beside the state).
func EtcdLog() string { return filepath.Join(StateDir, "etcd.log") }

// isOurEtcd matches the lab's etcd by its data directory.
func isOurEtcd(argv []string) bool {
	if len(argv) == 0 || filepath.Base(argv[0]) != "etcd" {
		return false
	}
	for i, a := range argv {
		if a == "--data-dir" && i+1 < len(argv) && argv[i+1] == etcdDataDir() {
			return true
		}
	}
	return false
}

// EtcdRunning reports whether the lab's etcd process exists.
func EtcdRunning() bool { return len(FindProcs(isOurEtcd)) > 0 }

// StartEtcd starts the lab's etcd (in its own session, so it outlives the
// command) and waits until it accepts connections. An etcd already
// running is kept. A restart after KillEtcd keeps the data: the cluster's
// keys and leases come back as etcd left them, as after a real crash.
func StartEtcd() error {
	if EtcdRunning() {
		return nil
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return fmt.Errorf("etcd not found (apt-get install etcd-server): %w", err)
	}
	peer := "http://127.0.0.1:2380"
	cmd := exec.Command("ip", "netns", "exec", SwitchNS, "etcd", "--name", "sanqos-lab",
		"--data-dir", etcdDataDir(),
		"--listen-client-urls", EtcdURL(), "--advertise-client-urls", EtcdURL(),
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "sanqos-lab="+peer,
		// Every indicator and record is a new revision (~30 a second
		// here, ~7,000 at 100 agents: README): without compaction the
		// history only grows until etcd's quota stops all writes.
		"--auto-compaction-mode", "revision", "--auto-compaction-retention", "10000",
		"--logger", "zap", "--log-outputs", "stderr")
	if err := startDetached(cmd, EtcdLog()); err != nil {
		return err
	}
	// ip netns exec execs etcd in place: the pid is etcd's. A lab an
	// older sanqos built has no record to write to; Down finds etcd by its
	// data directory all the same.
	recordProc("etcd", cmd.Process.Pid, "")
	cmd.Process.Release()
	return WaitFor("etcd", 15*time.Second, etcdAnswers)
}

// etcdAnswers dials etcd's client port from the switch namespace.
func etcdAnswers() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c, err := DialInNS(ctx, SwitchNS, fmt.Sprintf("%s:%d", EtcdAddr, etcdClientPort))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// KillEtcd kills the lab's etcd with SIGKILL (a crash, for experiments)
// and waits until it is gone.
func KillEtcd() error {
	pids := FindProcs(isOurEtcd)
	if len(pids) == 0 {
		return fmt.Errorf("no lab etcd to kill")
	}
	KillAll(pids)
	return WaitFor("etcd exit", 5*time.Second, func() bool { return !EtcdRunning() })
}
