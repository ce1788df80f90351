package discover

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
)

// tgt's portals as tgtadm printed them (tgtd 1.0.85, Debian's tgt, in a
// scratch namespace): tgtadm-portal-default.txt from a tgtd started
// without --iscsi portal= ([::]:3260 and 0.0.0.0:3260);
// tgtadm-portal-3261.txt from one started with portal=127.0.0.1:3260
// and then given 0.0.0.0:3261 and [::1]:3261 with `tgtadm --op new
// --mode portal`.
func TestParseTgtPortals(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []uint16
		err      bool
	}{
		{"captured: default", string(read(t, "tgtadm-portal-default.txt")), []uint16{3260}, false},
		{"captured: a second port", string(read(t, "tgtadm-portal-3261.txt")), []uint16{3260, 3261}, false},
		{"none", "", nil, false},
		{"IPv6, sorted, each once", "Portal: [::]:3261,1\nPortal: [fd00::1]:3260,1\nPortal: 0.0.0.0:3261,1\n", []uint16{3260, 3261}, false},
		{"a host name, kept as given", "Portal: target.example:3262,2\n", []uint16{3262}, false},
		{"no port", "Portal: 0.0.0.0,1\n", nil, true},
		{"port 0", "Portal: 0.0.0.0:0,1\n", nil, true},
		{"port past 65535", "Portal: [::]:65536,1\n", nil, true},
		{"no address", "Portal: :3260,1\n", nil, true},
		{"not a portal", "Portal: 0.0.0.0:3260,1\nTarget 1: iqn.a:b\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTgtPortals([]byte(tc.in))
			if tc.err != errors.Is(err, ErrSyntax) || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, %v; want %v (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

// tgt's portals are the daemon's: every target gets their ports, which
// the snapshot then holds; a tgtd that answers for its targets but not
// for its portals fails the read (its ports unknown, its hosts would be
// unthrottled unnoticed).
func TestReadTgt(t *testing.T) {
	canned := map[string][]byte{
		"-C 31 --lld iscsi --op show --mode target": read(t, "tgtadm-sessions.txt"),
		"-C 31 --lld iscsi --op show --mode portal": read(t, "tgtadm-portal-3261.txt"),
	}
	tgtadm := func(args ...string) ([]byte, error) {
		if out, ok := canned[strings.Join(args, " ")]; ok {
			return out, nil
		}
		return nil, errors.New("tgtadm: can't connect")
	}
	ts, err := ReadTgt(31, tgtadm)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range ts {
		if !reflect.DeepEqual(tg.Ports, []uint16{3260, 3261}) {
			t.Errorf("target %d: ports %v, want [3260 3261]", tg.TID, tg.Ports)
		}
	}
	if p := BuildSnapshot(ts, nil).Ports; !reflect.DeepEqual(p, []uint16{3260, 3261}) {
		t.Errorf("snapshot ports %v", p)
	}
	delete(canned, "-C 31 --lld iscsi --op show --mode portal")
	if _, err := ReadTgt(31, tgtadm); err == nil {
		t.Error("a failed portal show must fail the read")
	}
}

func FuzzParseTgtPortals(f *testing.F) {
	seed(f, "tgtadm-portal-*.txt")
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseTgtPortals(b)
	})
}

// A real tgtd in a scratch namespace, started on 3260 and given a second
// portal on 3261 the way an operator would (tgtadm --op new --mode
// portal): Tgt, the agent's reader, finds both.
func TestTgtPortalsLive(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "tgtd", "tgtadm")
	ns := testenv.ScratchNS(t, "sqportals", testenv.Veth{Dev: "sqp0", Addr: "10.251.0.1", Peer: "sqp1", PeerAddr: "10.251.0.2"})
	ctl := unusedControlPort(t)
	var log bytes.Buffer
	tgtd := exec.Command("ip", "netns", "exec", ns, "tgtd", "-f", "-C", strconv.Itoa(ctl), "--iscsi", "portal=10.251.0.1:3260")
	tgtd.Stdout, tgtd.Stderr = &log, &log
	if err := tgtd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tgtd.Process.Kill()
		tgtd.Wait()
		for _, f := range []string{"", ".lock"} {
			os.Remove(filepath.Join(TgtSocketDir, fmt.Sprintf("socket.%d%s", ctl, f)))
		}
	})
	tgtadm := func(args ...string) error {
		return exec.Command("tgtadm", append([]string{"-C", strconv.Itoa(ctl), "--lld", "iscsi"}, args...)...).Run()
	}
	for deadline := time.Now().Add(5 * time.Second); tgtadm("--op", "show", "--mode", "system") != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("tgtd -C %d did not answer within 5 s:\n%s", ctl, log.String())
		}
	}
	for _, args := range [][]string{
		{"--op", "new", "--mode", "target", "--tid", "1", "-T", "iqn.2026-11.test:portals"},
		{"--op", "new", "--mode", "portal", "--param", "portal=10.251.0.1:3261"},
	} {
		if err := tgtadm(args...); err != nil {
			t.Fatalf("tgtadm %v: %v\n%s", args, err, log.String())
		}
	}
	ts, err := Tgt(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || !reflect.DeepEqual(ts[0].Ports, []uint16{3260, 3261}) {
		t.Errorf("targets %+v, want one exported on [3260 3261]", ts)
	}
}

// unusedControlPort is a tgtd control port no tgtd on this host uses
// (its socket absent), away from the lab's.
func unusedControlPort(t *testing.T) int {
	for p := 7700; p < 7800; p++ {
		if _, err := os.Stat(filepath.Join(TgtSocketDir, fmt.Sprintf("socket.%d", p))); os.IsNotExist(err) {
			return p
		}
	}
	t.Fatal("no free tgtd control port in 7700..7799")
	return 0
}
