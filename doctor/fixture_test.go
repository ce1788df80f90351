package doctor

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/discover"
	"golang.org/x/sys/unix"
)

// fixture is a host the checks look at: a tree captured from a real
// machine (testdata/<base>), with files replaced or removed, the output
// the programs gave there, its interfaces, and a config.
type fixture struct {
	base   string            // testdata/<base> is Root
	files  map[string]string // path under Root → content; "" removes it
	status string            // testdata/status/<status> as /proc/self/status
	exec   map[string]string // "name arg..." → output, over the base's
	noExec []string          // programs not installed
	links  []Link            // nil: this host's (lo, ifb0, ifb1 down, eth0)
	dial   bool              // an agent answers on the control socket
	config string            // YAML; "" for no --config
	strict bool              // --strict
	ran    *[]string         // when set, every program run is added
}

func read(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// baseExec is what the programs printed on the host the tree came from.
func baseExec(t testing.TB, base string) map[string]string {
	m := map[string]string{
		"iptables -V":   "iptables v1.8.9 (legacy)\n",
		"iptables-save": "",
		"ipset list -n": "",
		// The lab's tgtd (-C 31) between experiments: no sessions; its
		// one portal (--iscsi portal=10.99.0.1:3260), in the format
		// ../discover/testdata/tgtadm-portal-*.txt captured.
		"tgtadm -C 31 --lld iscsi --op show --mode target": read(t, "testdata/host-6.18/tgtadm-C31.txt"),
		"tgtadm -C 31 --lld iscsi --op show --mode portal": read(t, "testdata/host-6.18/tgtadm-C31-portal.txt"),
	}
	if base == "host-6.18" {
		m["iptables -V"] = read(t, "testdata/host-6.18/iptables-V.txt")
	}
	return m
}

// labStat is stat(2) of the lab's backing stores as the machine gave it:
// the LUNs' loop devices (7:N), their backing files on the FUSE pool
// (0:39), the RAM LUN's file on /dev/shm (0:27); any other path is a
// regular file on a filesystem of its own (0:99).
func labStat(path string) (discover.FileDev, error) {
	if n, ok := strings.CutPrefix(path, "/dev/loop"); ok {
		minor, err := strconv.Atoi(n)
		if err != nil {
			return discover.FileDev{}, fs.ErrNotExist
		}
		return discover.FileDev{Block: true, Rdev: unix.Mkdev(7, uint32(minor)), Dev: 6}, nil
	}
	switch {
	case strings.HasPrefix(path, "/run/sanqos-lab/pool/"):
		return discover.FileDev{Dev: unix.Mkdev(0, 39)}, nil
	case strings.HasPrefix(path, "/dev/shm/"):
		return discover.FileDev{Dev: unix.Mkdev(0, 27)}, nil
	}
	return discover.FileDev{Dev: unix.Mkdev(0, 99)}, nil
}

// thisHost's interfaces, as the lab machine has them.
func thisHost() []Link {
	return []Link{
		{Interface: net.Interface{Index: 1, Name: "lo", Flags: net.FlagUp | net.FlagLoopback}, Addrs: []string{"127.0.0.1/8", "::1/128"}},
		{Interface: net.Interface{Index: 2, Name: "ifb0"}},
		{Interface: net.Interface{Index: 3, Name: "ifb1"}},
		{Interface: net.Interface{Index: 4, Name: "eth0", Flags: net.FlagUp}, Addrs: []string{"192.0.2.2/24", "fd00::2/64"}},
	}
}

func up(name, addr string) Link {
	return Link{Interface: net.Interface{Name: name, Flags: net.FlagUp}, Addrs: []string{addr}}
}

// env builds the fixture's Env: the tree copied (so files can be changed
// per case), programs answered from exec, backing stores all regular files
// on one filesystem (0:99), as a captured tree holds no device nodes.
func (f fixture) env(t *testing.T) *Env {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", f.base))); err != nil {
		t.Fatal(err)
	}
	for p, content := range f.files {
		dst := filepath.Join(root, p)
		if content == "" {
			if err := os.RemoveAll(dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if f.status != "" {
		if err := os.WriteFile(filepath.Join(root, "proc/self/status"), []byte(read(t, "testdata/status/"+f.status)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := baseExec(t, f.base)
	for k, v := range f.exec {
		out[k] = v
	}
	installed := map[string]bool{"iptables": true, "ip6tables": true, "iptables-save": true, "ipset": true, "tgtadm": true}
	for _, n := range f.noExec {
		delete(installed, n)
	}
	links := f.links
	if links == nil {
		links = thisHost()
	}
	h := Host{
		Root: root,
		Exec: func(name string, args ...string) ([]byte, error) {
			line := strings.Join(append([]string{name}, args...), " ")
			if f.ran != nil {
				*f.ran = append(*f.ran, line)
			}
			o, ok := out[line]
			if !ok || !installed[name] {
				return nil, errors.New("exit status 1: not on this fixture")
			}
			return []byte(o), nil
		},
		LookPath: func(name string) (string, error) {
			if installed[name] {
				return "/usr/sbin/" + name, nil
			}
			return "", &fs.PathError{Op: "lookpath", Path: name, Err: fs.ErrNotExist}
		},
		Links: func() ([]Link, error) { return links, nil },
		DialUnix: func(string) error {
			if f.dial {
				return nil
			}
			return errors.New("connection refused")
		},
		Stat: labStat,
	}
	path := ""
	if f.config != "" {
		path = filepath.Join(t.TempDir(), "sanqos.yaml")
		if err := os.WriteFile(path, []byte(f.config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := NewEnv(h, path)
	e.Strict = f.strict
	return e
}
