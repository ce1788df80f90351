package main

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// renamedFlags are the renames of issue 32 item 6 (one name per concept
// across commands); docs/cli.md lists them.
var renamedFlags = []struct {
	cmd       []string
	old, name string
	value     string
}{
	{[]string{"advise"}, "port", "iscsi-port", "3261"},
	{[]string{"advise"}, "target", "iqn", "iqn.2026-11.lab:vg1"},
	{[]string{"agent"}, "device", "interface", "eth1"},
}

// A renamed flag's old name still sets the same value, is hidden and
// deprecated, and the new name's help says it was renamed.
func TestRenamedFlagsStillWork(t *testing.T) {
	for _, tc := range renamedFlags {
		t.Run(tc.old, func(t *testing.T) {
			cmd, _, err := rootCmd().Find(tc.cmd)
			if err != nil {
				t.Fatal(err)
			}
			cmd.Flags().SetOutput(io.Discard) // the deprecation warning
			if err := cmd.ParseFlags([]string{"--" + tc.old, tc.value}); err != nil {
				t.Fatal(err)
			}
			f, old := cmd.Flags().Lookup(tc.name), cmd.Flags().Lookup(tc.old)
			if f == nil || f.Value.String() != tc.value {
				t.Fatalf("--%s %s did not set --%s", tc.old, tc.value, tc.name)
			}
			if !old.Hidden || !strings.Contains(old.Deprecated, "--"+tc.name) {
				t.Errorf("--%s: hidden %v, deprecated %q", tc.old, old.Hidden, old.Deprecated)
			}
			if !strings.Contains(f.Usage, "formerly --"+tc.old) {
				t.Errorf("--%s's help does not name --%s: %q", tc.name, tc.old, f.Usage)
			}
			help, _ := run(t, append(tc.cmd, "--help")...)
			if strings.Contains(help, "--"+tc.old+" ") {
				t.Errorf("--%s is still on the page", tc.old)
			}
		})
	}
}

// One name per concept: no visible flag uses a name that means something
// else elsewhere, or that another command spells differently.
func TestOneFlagNamePerConcept(t *testing.T) {
	avoid := map[string]string{
		"port":   "the iSCSI port is --iscsi-port everywhere",
		"target": "--target is the lab's tgt|lio; an IQN is --iqn",
		"device": "a network interface is --interface (as capture's); a device is a block device",
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			why, bad := avoid[f.Name]
			if bad && !f.Hidden && !(f.Name == "target" && strings.HasPrefix(c.CommandPath(), "sanqos-lab lab")) {
				t.Errorf("%s --%s: %s", c.CommandPath(), f.Name, why)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	for _, tree := range trees {
		walk(tree())
	}
}
