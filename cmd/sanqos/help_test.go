package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command a user can reach has a man-style page with a description
// and examples.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, tree := range trees {
		everyCommandHasHelp(t, tree)
	}
}

func everyCommandHasHelp(t *testing.T, tree func() *cobra.Command) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		n++
		if c.Short == "" || c.Long == "" || c.Example == "" {
			t.Errorf("%q: Short %t, Long %t, Example %t", c.CommandPath(), c.Short != "", c.Long != "", c.Example != "")
		}
		args := append(strings.Fields(c.CommandPath())[1:], "--help")
		out, err := runTree(t, tree, args...)
		if err != nil {
			t.Errorf("%v: %v", args, err)
		}
		for _, section := range []string{"NAME\n", "SYNOPSIS\n", "DESCRIPTION\n", "EXAMPLES\n", "SEE ALSO\n"} {
			if !strings.Contains(out, section) {
				t.Errorf("%v: no %s section", args, strings.TrimSpace(section))
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	root := tree()
	walk(root)
	if n < 10 {
		t.Fatalf("%s: walked only %d commands", root.Name(), n)
	}
}

// The help pages (and the man pages generated from them) hold the
// README's rule (TestReadmeOrderAndRoot): an operator on a fresh Debian
// machine is root and may have no sudo, so no example runs a command
// through sudo, not even after && or in a pipe; a command that needs root
// says so once in its description.
func TestHelpExamplesRunAsRoot(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for i, l := range strings.Split(c.Example, "\n") {
			for _, part := range splitCommands(cutComment(l)) {
				w := shellWords(part)
				if len(w) == 0 {
					continue
				}
				n++
				if w[0] == "sudo" {
					t.Errorf("%q: Example line %d runs sudo: %s", c.CommandPath(), i+1, strings.TrimSpace(l))
				}
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	for _, tree := range trees {
		walk(tree())
	}
	if n < 50 {
		t.Fatalf("read only %d example commands; is the walk broken?", n)
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, tree := range trees {
		name := tree().Name()
		for _, sh := range []string{"bash", "zsh", "fish"} {
			out, err := runTree(t, tree, "completion", sh)
			if err != nil || !strings.Contains(out, name) || len(out) < 1000 {
				t.Errorf("%s %s: %v (%d bytes)", name, sh, err, len(out))
			}
		}
	}
}
