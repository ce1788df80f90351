package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		{"ok", []string{"version"}, exitOK, ""},
		{"unknown flag", []string{"status", "--sockt", noSock}, exitUsage, "did you mean --socket?"},
		{"typo of a renamed flag", []string{"agent", "--devic", "eth0"}, exitUsage, "did you mean --interface?"},
		{"flag value", []string{"status", "--watch=soon"}, exitUsage, "invalid argument"},
		{"too many args", []string{"config", "check", "a", "b"}, exitUsage, "accepts 1 arg(s)"},
		{"required flag", []string{"capture", "--portal", "10.0.0.1"}, exitUsage, `required flag(s) "interface"`},
		{"no throttle flags", []string{"throttle", "set", "10.0.0.1", "--socket", noSock}, exitUsage, "give --read-delay"},
		{"bare delay", []string{"throttle", "set", "10.0.0.1", "--write-delay", "2", "--socket", noSock}, exitUsage, "--write-delay: delay"},
		{"bad consumer", []string{"throttle", "set", "host1", "--write-delay", "2ms", "--socket", noSock}, exitUsage, `consumer "host1"`},
		{"no etcd", []string{"cluster", "policy", "get"}, exitUsage, "--etcd is required"},
		{"unknown scenario", []string{"sim", "nosuch"}, exitUsage, `no scenario or command "nosuch"`},
		{"missing config", []string{"config", "check", filepath.Join(dir, "none.yaml")}, exitConfig, "no such file"},
		{"invalid config", []string{"config", "check", bad}, exitConfig, "threshold"},
		{"refused policy", []string{"cluster", "--etcd", "http://127.0.0.1:1", "policy", "put", bad}, exitConfig, "nothing written"},
		{"no agent", []string{"throttle", "list", "--socket", noSock}, exitRuntime, "agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.args...)
			if got := exitCode(err); got != tc.code {
				t.Errorf("%v: exit %d, want %d (%v)", tc.args, got, tc.code, err)
			}
			if tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("%v: error %v, want it to say %q", tc.args, err, tc.msg)
			}
		})
	}
}

// The lab guest's own exit status passes through; wrapping keeps each
// kind.
func TestExitCodeWrapped(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{exitCodeError(7), 7},
		{errors.Join(errors.New("x"), usagef("y")), exitUsage},
		{configError{errors.New("x")}, exitConfig},
		{errors.New("x"), exitRuntime},
	} {
		if got := exitCode(tc.err); got != tc.code {
			t.Errorf("%v: %d, want %d", tc.err, got, tc.code)
		}
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
	}{
		{[]string{"config", "chek"}, "check"},
		{[]string{"throttle", "clear-all"}, "clear --all"},
		{[]string{"throttle", "lst"}, "list"},
		{[]string{"cluster", "polcy"}, "policy"},
		{[]string{"cluster", "--etcd", "http://127.0.0.1:1", "polcy"}, "policy"},
		{[]string{"cluster", "policy", "gett"}, "get"},
		{[]string{"lab", "upp"}, "up"},
		{[]string{"completion", "bsh"}, "bash"},
		{[]string{"sim", "calbrate"}, "calibrate"},
		{[]string{"sim", "pdi"}, "pid"},
		{[]string{"help", "config", "chek"}, "check"},
		{[]string{"statsu"}, "status"},
		{[]string{"config", "frobnicate"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := run(t, tc.args...)
			if code := exitCode(err); code != exitUsage {
				t.Fatalf("exit %d, want %d (%v)\n%s", code, exitUsage, err, out)
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
			_, err := run(t, append(path, typo)...)
			if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "\t"+s.Name()) {
				t.Errorf("%s %s: exit %d, %v", c.CommandPath(), typo, exitCode(err), err)
			}
			break
		}
		if len(path) > 0 && c.Use == c.Name() { // a group, not a command with subcommands (sim)
			out, err := run(t, path...)
			if err != nil || !strings.Contains(out, "COMMANDS") {
				t.Errorf("%s alone: %v\n%s", c.CommandPath(), err, out)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(rootCmd())
	if groups < 7 { // root, cluster, cluster policy, config, lab, throttle, sim, completion
		t.Fatalf("tried only %d groups", groups)
	}
}
