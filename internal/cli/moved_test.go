package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// A command that moved to the lab binary is named with where it went;
// any other unknown command gets only the usual line.
func TestUnknownCommandNamesTheBinaryItMovedTo(t *testing.T) {
	for _, tc := range []struct {
		arg, hint string
	}{
		{"lab", "'lab' is in sanqos-lab"},
		{"sim", "'sim' is in sanqos-lab"},
		{"labb", ""},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			root := &cobra.Command{Use: "sanqos", SilenceErrors: true, SilenceUsage: true}
			root.AddCommand(&cobra.Command{Use: "status", Run: func(*cobra.Command, []string) {}})
			Setup(root, "")
			Moved(root, "sanqos-lab", "lab", "sim")
			root.SetArgs([]string{tc.arg})
			root.SetOut(io.Discard)
			cmd, err := root.ExecuteC()
			if ExitCode(err) != ExitUsage {
				t.Fatalf("exit %d (%v), want usage", ExitCode(err), err)
			}
			var out bytes.Buffer
			PrintError(&out, cmd, err)
			got := strings.Contains(out.String(), "is in sanqos-lab")
			if tc.hint == "" && got {
				t.Errorf("hint for a command that never moved:\n%s", out.String())
			}
			if tc.hint != "" && !strings.Contains(out.String(), tc.hint) {
				t.Errorf("no %q in:\n%s", tc.hint, out.String())
			}
		})
	}
}
