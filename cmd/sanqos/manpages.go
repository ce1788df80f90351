package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/internal/version"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manpagesCmd writes section 1 man pages for every visible command. It is
// hidden: packagers call it (internal/pkgdeb, for the .deb), operators
// read the pages with man(1) or the same text with --help. It lives in the
// binary because the command tree does, so the pages always describe the
// binary they ship with.
func manpagesCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "manpages DIR",
		Short:  "Write man pages (section 1) of every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeManPages(args[0])
		},
	}
}

// writeManPages renders a fresh command tree (not the running one, whose
// help command and flags cobra has already initialised) into dir. The
// date is SOURCE_DATE_EPOCH's when set (cobra/doc reads it), so a package
// built twice from one commit holds the same pages.
func writeManPages(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root := rootCmd()
	root.DisableAutoGenTag = true
	// No Title: cobra/doc then titles each page after its command.
	header := &doc.GenManHeader{Section: "1", Source: "sanqos " + version.Version, Manual: "sanqos manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return err
	}
	return addExitStatus(filepath.Join(dir, "sanqos.1"), cli.ExitStatus(root))
}

// addExitStatus puts the root page's EXIT STATUS section (what --help
// shows) before its SEE ALSO, where man-pages(7) orders it; cobra/doc has
// no hook for extra sections.
func addExitStatus(page, status string) error {
	b, err := os.ReadFile(page)
	if err != nil {
		return err
	}
	const seeAlso = "\n.SH SEE ALSO\n"
	i := bytes.Index(b, []byte(seeAlso))
	if i < 0 {
		return fmt.Errorf("%s: no SEE ALSO section to put EXIT STATUS before", page)
	}
	// .nf keeps the table's columns; a backslash is roff's escape.
	section := "\n.SH EXIT STATUS\n.nf\n" + strings.ReplaceAll(status, `\`, `\e`) + "\n.fi\n"
	out := append(append(append([]byte{}, b[:i]...), section...), b[i:]...)
	return os.WriteFile(page, out, 0o644)
}
