package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// issueRef is the project's own issue numbers, which an operator cannot
// look up.
var issueRef = regexp.MustCompile(`(?i)\bissues? #?\d+|\(#\d+\)`)

// internalRef adds the design seeds the code cites, just as private.
var internalRef = regexp.MustCompile(issueRef.String() + `|(?i)\bseed 0\d\d\b`)

// No help page shows an issue number: every command's --help, the
// experiments 'lab run --help' lists included.
func TestHelpHasNoInternalRefs(t *testing.T) {
	for _, tree := range trees {
		helpHasNoInternalRefs(t, tree)
	}
}

func helpHasNoInternalRefs(t *testing.T, tree func() *cobra.Command) {
	var walk func(c *cobra.Command)
	pages := 0
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		out, err := runTree(t, tree, append(strings.Fields(c.CommandPath())[1:], "--help")...)
		if err != nil {
			t.Fatalf("%s --help: %v", c.CommandPath(), err)
		}
		pages++
		for _, line := range strings.Split(out, "\n") {
			if issueRef.MatchString(line) {
				t.Errorf("%s --help: %q", c.CommandPath(), strings.TrimSpace(line))
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	root := tree()
	walk(root)
	if pages < 10 {
		t.Fatalf("%s: read only %d pages", root.Name(), pages)
	}
}

// No string of either binary's commands (help, usage, errors, output)
// carries an issue number or a seed; comments may.
func TestStringsHaveNoInternalRefs(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "../sanqos-lab", "../../internal/cli", "../../internal/labcli"} {
		f, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f...)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && internalRef.MatchString(lit.Value) {
				t.Errorf("%s: %s", fset.Position(lit.Pos()), internalRef.FindString(lit.Value))
			}
			return true
		})
	}
}
