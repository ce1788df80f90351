package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testdata/nvmet-guest is nvmet's configfs as the stock-kernel guest's
// kernel (Debian 6.1, nvmet and nvmet-tcp) built it, copied file by file
// with its symlinks as the kernel made them: subsystem vg1 open to any
// host with two namespaces on loop devices, subsystem ram open to host b3
// only with namespace 7 enabled and 8 (a plain file) not, port 1 on
// 127.0.0.1:4420 exporting both, port 2 on [::1]:4421 exporting vg1; b2
// connected to vg1 with two I/O queues and b3 to ram with one while it
// was copied.
func TestReadNVMetCapturedInGuest(t *testing.T) {
	n, err := ReadNVMet(filepath.Join("testdata", "nvmet-guest", "nvmet"))
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for _, s := range n.Subsystems {
		subs = append(subs, fmt.Sprintf("%s acl=%v luns=%v sessions=%d", s.IQN, s.ACL, s.LUNs, len(s.Sessions)))
	}
	want := []string{
		"nqn.2026-11.lab:ram acl=[nqn.2026-11.lab:b3] luns=[{7 disk  /dev/loop2 }] sessions=0",
		"nqn.2026-11.lab:vg1 acl=[ALL] luns=[{1 disk  /dev/loop0 } {2 disk  /dev/loop1 }] sessions=0",
	}
	if !reflect.DeepEqual(subs, want) {
		t.Errorf("subsystems:\n got %q\nwant %q", subs, want)
	}
	wantPorts := []NVMePort{
		{ID: 1, Transport: "tcp", Family: "ipv4", Addr: "127.0.0.1", Service: "4420", Subsystems: []string{"nqn.2026-11.lab:ram", "nqn.2026-11.lab:vg1"}},
		{ID: 2, Transport: "tcp", Family: "ipv6", Addr: "::1", Service: "4421", Subsystems: []string{"nqn.2026-11.lab:vg1"}},
	}
	if !reflect.DeepEqual(n.Ports, wantPorts) {
		t.Errorf("ports:\n got %+v\nwant %+v", n.Ports, wantPorts)
	}
}

// A host without nvmet (module not loaded, configfs not mounted) and a
// tree the kernel would not build are errors that say so, not an empty
// target.
func TestReadNVMetErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no nvmet", nil, "subsystems"},
		{"no ports dir", map[string]string{"subsystems/": ""}, "ports"},
		{"subsystem without attr", map[string]string{"subsystems/nqn.x/namespaces/": "", "ports/": ""}, "attr_allow_any_host"},
		{"namespace without device_path", map[string]string{
			"subsystems/nqn.x/attr_allow_any_host": "1\n", "subsystems/nqn.x/namespaces/1/enable": "1\n", "ports/": ""}, "device_path"},
		{"port without trtype", map[string]string{"subsystems/": "", "ports/1/subsystems/": ""}, "addr_trtype"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "nvmet")
			for p, body := range tc.files {
				full := filepath.Join(root, p)
				if strings.HasSuffix(p, "/") {
					if err := os.MkdirAll(full, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadNVMet(root)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nvmet") {
				t.Errorf("err = %v, want one naming nvmet and %q", err, tc.want)
			}
		})
	}
}
