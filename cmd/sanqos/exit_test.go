package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/internal/labcli"
	"github.com/spf13/cobra"
)

// Every kind of failure has its own exit status: usage 2, config 3,
// runtime 1 (see exitStatusHelp and docs/cli.md).
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("threshold: 0ms\nresources:\n  - name: vg1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noSock := filepath.Join(dir, "none.sock")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"ok", []string{"version"}, cli.ExitOK, ""},
		{"unknown flag", []string{"status", "--sockt", noSock}, cli.ExitUsage, "did you mean --socket?"},
		{"typo of a renamed flag", []string{"agent", "--devic", "eth0"}, cli.ExitUsage, "did you mean --interface?"},
		{"flag value", []string{"status", "--watch=soon"}, cli.ExitUsage, "invalid argument"},
		{"too many args", []string{"config", "check", "a", "b"}, cli.ExitUsage, "accepts 1 arg(s)"},
		{"required flag", []string{"capture", "--portal", "10.0.0.1"}, cli.ExitUsage, `required flag(s) "interface"`},
		{"no throttle flags", []string{"throttle", "set", "10.0.0.1", "--socket", noSock}, cli.ExitUsage, "give --read-delay"},
		{"bare delay", []string{"throttle", "set", "10.0.0.1", "--write-delay", "2", "--socket", noSock}, cli.ExitUsage, "--write-delay: delay"},
		{"bad consumer", []string{"throttle", "set", "host1", "--write-delay", "2ms", "--socket", noSock}, cli.ExitUsage, `consumer "host1"`},
		{"no etcd", []string{"cluster", "policy", "get"}, cli.ExitUsage, "--etcd is required"},
		{"missing config", []string{"config", "check", filepath.Join(dir, "none.yaml")}, cli.ExitConfig, "no such file"},
		{"invalid config", []string{"config", "check", bad}, cli.ExitConfig, "threshold"},
		{"refused policy", []string{"cluster", "--etcd", "http://127.0.0.1:1", "policy", "put", bad}, cli.ExitConfig, "nothing written"},
		{"no agent", []string{"throttle", "list", "--socket", noSock}, cli.ExitRuntime, "agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.args...)
			if got := cli.ExitCode(err); got != tc.code {
				t.Errorf("%v: exit %d, want %d (%v)", tc.args, got, tc.code, err)
			}
			if tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("%v: error %v, want it to say %q", tc.args, err, tc.msg)
			}
		})
	}
}

// sanqos --help documents the exit statuses.
func TestHelpExitStatus(t *testing.T) {
	out, err := run(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"EXIT STATUS", "2  usage", "3  config"} {
		if !strings.Contains(out, want) {
			t.Errorf("sanqos --help lacks %q", want)
		}
	}
	sub, _ := run(t, "status", "--help")
	if strings.Contains(sub, "EXIT STATUS") {
		t.Error("the exit statuses are on every page, not only the root's")
	}
}

// A mistyped subcommand of any command group is a usage error naming the
// nearest subcommands, never the group's help and status 0; the group
// alone still prints its help.
func TestUnknownSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		suggest string // "": no suggestion expected
		lab     bool   // sanqos-lab's
	}{
		{[]string{"config", "chek"}, "check", false},
		{[]string{"throttle", "clear-all"}, "clear --all", false},
		{[]string{"throttle", "lst"}, "list", false},
		{[]string{"cluster", "polcy"}, "policy", false},
		{[]string{"cluster", "--etcd", "http://127.0.0.1:1", "polcy"}, "policy", false},
		{[]string{"cluster", "policy", "gett"}, "get", false},
		{[]string{"completion", "bsh"}, "bash", false},
		{[]string{"help", "config", "chek"}, "check", false},
		{[]string{"statsu"}, "status", false},
		{[]string{"config", "frobnicate"}, "", false},
		{[]string{"lab", "upp"}, "up", true},
		{[]string{"sim", "calbrate"}, "calibrate", true},
		{[]string{"sim", "pdi"}, "pid", true},
		{[]string{"sim", "nosuch"}, "", true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			tree := rootCmd
			if tc.lab {
				tree = labcli.Root
			}
			out, err := runTree(t, tree, tc.args...)
			if code := cli.ExitCode(err); code != cli.ExitUsage {
				t.Fatalf("exit %d, want %d (%v)\n%s", code, cli.ExitUsage, err, out)
			}
			if strings.Contains(out, "SYNOPSIS") {
				t.Errorf("printed help:\n%s", out)
			}
			if tc.suggest != "" && !strings.Contains(err.Error(), "Did you mean this?\n\t"+tc.suggest) {
				t.Errorf("error %q does not suggest %q", err, tc.suggest)
			}
		})
	}
}

// Every group, whoever adds it, rejects a mistyped subcommand and
// suggests the real one; alone it prints its page and exits 0.
func TestEveryGroupRejectsUnknown(t *testing.T) {
	for _, tree := range trees {
		everyGroupRejectsUnknown(t, tree)
	}
}

func everyGroupRejectsUnknown(t *testing.T, tree func() *cobra.Command) {
	groups := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.HasAvailableSubCommands() {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		for _, s := range c.Commands() {
			if !s.IsAvailableCommand() || len(s.Name()) < 3 {
				continue
			}
			typo := s.Name()[:len(s.Name())-1] + "x" // one substitution
			if c.Commands()[0] != s && typo == c.Commands()[0].Name() {
				continue
			}
			groups++
			_, err := runTree(t, tree, append(path, typo)...)
			if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(fmt.Sprint(err), "\t"+s.Name()) {
				t.Errorf("%s %s: exit %d, %v", c.CommandPath(), typo, cli.ExitCode(err), err)
			}
			break
		}
		if len(path) > 0 && c.Use == c.Name() { // a group, not a command with subcommands (sim)
			out, err := runTree(t, tree, path...)
			if err != nil || !strings.Contains(out, "COMMANDS") {
				t.Errorf("%s alone: %v\n%s", c.CommandPath(), err, out)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	root := tree()
	walk(root)
	if groups < 4 { // sanqos: root, cluster, cluster policy, config, throttle, completion; sanqos-lab: root, lab, sim, completion
		t.Fatalf("%s: tried only %d groups", root.Name(), groups)
	}
}
