package config

import (
	"errors"
	"strings"
	"testing"
)

// What the config accepts but does not do what it says is a warning, at
// its line with its value (issue 52 item 7): an address twice in a list,
// one both important and throttleable, a device twice. Each row is one
// input and all its warnings, in line order.
func TestWarningsExact(t *testing.T) {
	res := "resources:\n  - name: vg1\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"important and throttleable", res + "    important: [10.0.0.1]\n    throttleable: [10.0.0.2, 10.0.0.1]\n",
			[]string{"line 4: resources[0].throttleable[1]: 10.0.0.1: also important (important[0] on line 3): an important consumer is never slowed, so this entry does nothing"}},
		{"as an IPv4-mapped address", res + "    important: [10.0.0.1]\n    throttleable:\n      - \"::ffff:10.0.0.1\"\n",
			[]string{`line 5: resources[0].throttleable[0]: ::ffff:10.0.0.1: also important (important[0] on line 3): an important consumer is never slowed, so this entry does nothing`}},
		{"important twice", res + "    important:\n      - 10.0.0.1\n      - 10.0.0.2\n      - 10.0.0.1\n",
			[]string{"line 6: resources[0].important[2]: 10.0.0.1: listed twice: also important[0] on line 4; delete one"}},
		{"throttleable twice", res + "    throttleable: [10.0.0.3, 10.0.0.3]\n",
			[]string{"line 3: resources[0].throttleable[1]: 10.0.0.3: listed twice: also throttleable[0] on line 3; delete one"}},
		{"device twice", res + "    devices: [sdb, sdc, sdb]\n",
			[]string{"line 3: resources[0].devices[2]: sdb: listed twice: also devices[0] on line 3; delete one"}},
		{"in line order, across resources", res + "    important: [10.0.0.1, 10.0.0.1]\n  - name: vg2\n    important: [10.0.0.5]\n    throttleable: [10.0.0.5]\n" +
			"    devices: [sdd, sdd]\n", []string{
			"line 3: resources[0].important[1]: 10.0.0.1: listed twice: also important[0] on line 3; delete one",
			"line 6: resources[1].throttleable[0]: 10.0.0.5: also important (important[0] on line 5): an important consumer is never slowed, so this entry does nothing",
			"line 7: resources[1].devices[1]: sdd: listed twice: also devices[0] on line 7; delete one",
		}},
		// Not a conflict: each resource has its own lists.
		{"important here, throttleable there", res + "    important: [10.0.0.1]\n  - name: vg2\n    throttleable: [10.0.0.1]\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(c.Warnings, "\n"), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("warnings\n got %s\nwant %s", got, want)
			}
		})
	}
}

// The devices a config names are checked against /proc/diskstats, read
// with procfs from a tree captured on the lab machine (testdata/proc:
// loop0..loop7, vda, zram0), or from any DeviceLister.
func TestCheckDevices(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"all there", "resources:\n  - name: vg1\n    devices: [loop0, vda]\n", nil},
		{"auto is not a device", "resources:\n  - name: vg1\n", nil},
		{"missing", "resources:\n  - name: vg1\n    devices:\n      - loop0\n      - sdb\n",
			[]string{"line 5: resources[0].devices[1]: sdb: not in /proc/diskstats: the agent would measure no read wait on it"}},
		{"a typo names the device", "resources:\n  - name: vg1\n    devices: [vdb]\n",
			[]string{"line 3: resources[0].devices[0]: vdb: not in /proc/diskstats: the agent would measure no read wait on it (did you mean vda?)"}},
		{"two edits are another name", "resources:\n  - name: vg1\n    devices: [lop0, sdb]\n", []string{
			"line 3: resources[0].devices[0]: lop0: not in /proc/diskstats: the agent would measure no read wait on it (did you mean loop0?)",
			"line 3: resources[0].devices[1]: sdb: not in /proc/diskstats: the agent would measure no read wait on it",
		}},
		{"no guess among equals", "resources:\n  - name: vg1\n    devices: [loop9]\n",
			[]string{"line 3: resources[0].devices[0]: loop9: not in /proc/diskstats: the agent would measure no read wait on it"}},
		{"consumer devices", "resources:\n  - name: vg1\n    consumer_devices:\n      10.0.0.1: [loop1, md0]\n",
			[]string{"line 4: resources[0].consumer_devices.10.0.0.1[1]: md0: not in /proc/diskstats: the agent would measure no read wait on it"}},
		{"after Parse's, in line order", "resources:\n  - name: vg1\n    devices: [sdb, sdb]\n  - name: vg2\n    devices: [sdc]\n", []string{
			"line 3: resources[0].devices[1]: sdb: listed twice: also devices[0] on line 3; delete one",
			"line 3: resources[0].devices[0]: sdb: not in /proc/diskstats: the agent would measure no read wait on it",
			"line 3: resources[0].devices[1]: sdb: not in /proc/diskstats: the agent would measure no read wait on it",
			"line 5: resources[1].devices[0]: sdc: not in /proc/diskstats: the agent would measure no read wait on it",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.CheckDevices(Diskstats("testdata/proc")); err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Join(c.Warnings, "\n"), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("warnings\n got %s\nwant %s", got, want)
			}
		})
	}
	// A lister that fails checks nothing and says why.
	c, _ := Parse([]byte("resources:\n  - name: vg1\n    devices: [sdb]\n"))
	if err := c.CheckDevices(func() ([]string, error) { return nil, errors.New("no /proc") }); err == nil || len(c.Warnings) != 0 {
		t.Errorf("failing lister: %v, warnings %q", err, c.Warnings)
	}
	if err := c.CheckDevices(Diskstats(t.TempDir())); err == nil {
		t.Error("a tree without diskstats: no error")
	}
	// Without a device named, the host is not read.
	c, _ = Parse([]byte("resources:\n  - name: vg1\n"))
	if err := c.CheckDevices(func() ([]string, error) { t.Error("listed devices"); return nil, nil }); err != nil {
		t.Error(err)
	}
}
