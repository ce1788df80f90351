package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Run runs argv and returns its combined output; if it fails, it fails t
// with the command line and the output.
func Run(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// Veth is a veth pair of a scratch namespace and the /24 addresses (no
// mask) of its two ends.
type Veth struct {
	Dev, Addr, Peer, PeerAddr string
}

// ScratchNS creates a network namespace named prefix-<random hex>, with
// lo and the veth pair v up and addressed, and deletes it when t ends: an
// agent run in it never touches the host's rules, sets, qdiscs and
// queues, nor a lab experiment's. It needs root and ip.
func ScratchNS(t testing.TB, prefix string, v Veth) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	ns := prefix + "-" + hex.EncodeToString(b)
	Run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	for _, c := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", v.Dev, "type", "veth", "peer", "name", v.Peer},
		{"addr", "add", v.Addr + "/24", "dev", v.Dev},
		{"addr", "add", v.PeerAddr + "/24", "dev", v.Peer},
		{"link", "set", v.Dev, "up"},
		{"link", "set", v.Peer, "up"},
	} {
		Run(t, append([]string{"ip", "-n", ns}, c...)...)
	}
	return ns
}

// BlockDevice is a block device of this machine (the first in
// /proc/diskstats), for an agent config's static resource; Missing if
// there is none.
func BlockDevice(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			return f[2]
		}
	}
	Missing(t, "no block device in /proc/diskstats")
	return ""
}
