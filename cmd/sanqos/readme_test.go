package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/labcli"
	"github.com/sanqos/sanqos/report"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The documents whose sanqos commands must exist as written: the README
// and the pages that moved out of it (issue 32 item 1).
var commandDocs = []string{
	"README.md",
	"docs/operator-guide.md",
	"docs/lab.md",
	"docs/experiments.md",
	"docs/architecture.md",
	"docs/configuration.md",
}

// readmeMaxLines keeps the README what issue 32 asks: the operator's page,
// everything else in docs/.
const readmeMaxLines = 250

// Every `sanqos ...` command in the README and the docs pages it links to
// (code blocks and inline code) names a command path that exists and only
// flags that exist on it. A flag renamed with its old name kept as a
// deprecated alias still passes, with a note to use the new name.
func TestDocumentedCommandsExist(t *testing.T) {
	total := 0
	for _, doc := range commandDocs {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		cmds := sanqosCommands(string(b))
		if doc == "README.md" && len(cmds) < 10 {
			t.Fatalf("%s: found only %d sanqos commands; is the extraction broken?", doc, len(cmds))
		}
		for _, c := range cmds {
			total++
			if os.Getenv("SANQOS_LIST_DOC_COMMANDS") != "" {
				t.Logf("%s:%d: %s %s", doc, c.line, c.prog, strings.Join(c.args, " "))
			}
			root := c.root()
			for _, p := range checkCommand(root, c.args) {
				t.Errorf("%s:%d: %s: %s", doc, c.line, strings.Join(c.args, " "), p)
			}
			for _, d := range deprecatedFlags(root, c.args) {
				t.Logf("%s:%d: %s: %s is a deprecated alias; write the new name", doc, c.line, strings.Join(c.args, " "), d)
			}
		}
	}
	t.Logf("%d commands checked", total)
}

func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the detail to docs/", n, readmeMaxLines)
	}
}

// The README is an operator's page that works on a fresh Debian machine
// as root: no command needs sudo (a root machine may not have it), and
// the production path (install, roll out, undo) comes before the lab.
func TestReadmeOrderAndRoot(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for i, l := range strings.Split(md, "\n") {
		for _, w := range strings.Fields(cutComment(l)) {
			if w == "sudo" || w == "`sudo" {
				t.Errorf("README.md:%d: sudo: %s", i+1, l)
			}
		}
	}
	at := func(h string) int {
		i := strings.Index(md, "\n"+h+"\n")
		if i < 0 {
			t.Fatalf("README.md has no %q", h)
		}
		return i
	}
	if at("## Install") > at("## Roll it out") || at("## Roll it out") > at("## The lab: demo and tests") {
		t.Error("README.md: want Install, then Roll it out (the production path), then the lab")
	}
}

// The demo ends with the cure: the report of its run, whose last line
// (TestReportInterferers) gives the reader's p95 with the agent off and on
// and names the before/after plot, and a check that the plot is there.
// The README shows one such plot, and only that picture.
func TestDemoEndsWithThePicture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(cutComment(l)); l != "" {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) < 2 {
		t.Fatalf("scripts/demo.sh: %d commands", len(cmds))
	}
	last2 := cmds[len(cmds)-2:]
	if !strings.Contains(last2[0], "sanqos-lab report") || !strings.Contains(last2[1], report.BeforeAfterPlot) {
		t.Errorf("scripts/demo.sh ends with %q, want its run's report, then a check of %s", last2, report.BeforeAfterPlot)
	}
	if !strings.Contains(string(b), "lab run read-backup") {
		t.Error("scripts/demo.sh does not run read-backup (the backup with the agent off and on)")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	imgs := regexp.MustCompile(`!\[[^\]]*\]\(([^)]+)\)`).FindAllStringSubmatch(string(readme), -1)
	if len(imgs) != 1 || imgs[0][1] != "docs/img/before-after.png" {
		t.Fatalf("README.md pictures %v, want the one before/after plot docs/img/before-after.png", imgs)
	}
	if fi, err := os.Stat(filepath.Join("..", "..", imgs[0][1])); err != nil || fi.Size() == 0 {
		t.Errorf("%s: %v", imgs[0][1], err)
	}
}

// The checker itself: what it must accept and what it must refuse.
func TestCheckCommand(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
	}{
		{"sanqos doctor --config /etc/sanqos/sanqos.yaml --json", true},
		{"sanqos status --watch", true},
		{"sanqos status --watch=500ms --count 10", true},
		{"sanqos throttle set 10.99.0.3 --write-delay 2ms", true},
		{"sanqos throttle clear --all", true},
		{"sanqos-lab lab guest -- uname -r --whatever", true},
		{"bin/sanqos-lab sim autonomic --seed 2", true},
		{"sanqos lab up", false},
		{"sanqos-lab status", false},
		{"sanqos COMMAND --help", true},
		{"sanqos completion bash|zsh|fish", true},
		{"ip netns exec bm sanqos cleanup --label x", true},
		{"sanqos statsu --watch", false},
		{"sanqos throttle sett 10.99.0.3", false},
		{"sanqos doctor --no-such-flag", false},
		{"sanqos throttle set 10.99.0.3 --write-dealy 2ms", false},
	} {
		cmds := sanqosCommands("```sh\n" + c.line + "\n```\n")
		if len(cmds) != 1 {
			t.Errorf("%q: extracted %d commands", c.line, len(cmds))
			continue
		}
		problems := checkCommand(cmds[0].root(), cmds[0].args)
		if (len(problems) == 0) != c.ok {
			t.Errorf("%q: problems %v, want ok=%v", c.line, problems, c.ok)
		}
	}
	// Alternatives in prose: each one must be a command.
	if p := checkCommand(rootCmd(), []string{"completion", "bash|tcsh"}); len(p) == 0 {
		t.Error("completion bash|tcsh: no problem found")
	}
	// Not sanqos commands: a unit name, a path argument.
	for _, s := range []string{"journalctl -u sanqos -f", "systemctl reload sanqos", "make install"} {
		if cmds := sanqosCommands("```sh\n" + s + "\n```\n"); len(cmds) != 0 {
			t.Errorf("%q taken for a sanqos command: %v", s, cmds)
		}
	}
	if cmds := sanqosCommands("run `sanqos status --json` and `sanqos cleanup`."); len(cmds) != 2 {
		t.Errorf("inline code: %v", cmds)
	}
}

type docCommand struct {
	line int
	prog string   // sanqos or sanqos-lab
	args []string // after prog
}

// root is the command tree of c's binary.
func (c docCommand) root() *cobra.Command {
	if c.prog == "sanqos-lab" {
		return labcli.Root()
	}
	return rootCmd()
}

var inlineSanqos = regexp.MustCompile("`((?:bin/)?sanqos(?:-lab)? [^`]+)`")

// sanqosCommands finds the sanqos and sanqos-lab command lines of a
// markdown text: in shell code blocks every command line (continuations
// joined, comments cut, split at && || ; | &) whose program is one of
// them, possibly behind ip netns exec, setpriv, flock, nsenter, env or
// sudo; in prose every inline code span that starts with one.
func sanqosCommands(md string) []docCommand {
	var out []docCommand
	lines := strings.Split(md, "\n")
	inCode, shell := false, false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if !inCode {
				lang := strings.TrimPrefix(strings.TrimSpace(l), "```")
				shell = lang == "" || lang == "sh" || lang == "bash" || lang == "console" || lang == "shell"
			}
			inCode = !inCode
			continue
		}
		if !inCode {
			for _, m := range inlineSanqos.FindAllStringSubmatch(l, -1) {
				if prog, args, ok := programArgs(shellWords(m[1])); ok {
					out = append(out, docCommand{i + 1, prog, args})
				}
			}
			continue
		}
		if !shell {
			continue
		}
		start := i
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + lines[i]
		}
		for _, part := range splitCommands(cutComment(l)) {
			if prog, args, ok := programArgs(shellWords(part)); ok {
				out = append(out, docCommand{start + 1, prog, args})
			}
		}
	}
	return out
}

// cutComment drops a shell comment: a # at the start of a word, outside
// quotes.
func cutComment(l string) string {
	var q rune
	for i, r := range l {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i]
		}
	}
	return l
}

// splitCommands splits a command line at && || ; | and &, outside quotes.
func splitCommands(l string) []string {
	var parts []string
	var cur strings.Builder
	var q rune
	rs := []rune(l)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == ';' || r == '|' || r == '&':
			if i+1 < len(rs) && rs[i+1] == r {
				i++
			}
			parts = append(parts, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(parts, cur.String())
}

// shellWords splits a command into words as a shell would for plain
// quoting (no expansions), dropping redirections.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var q rune
	in := false
	flush := func() {
		if in {
			words = append(words, cur.String())
		}
		cur.Reset()
		in = false
	}
	for _, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			q, in = r, true
		case r == ' ' || r == '\t':
			flush()
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	flush()
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == ">" || w == ">>" || w == "<" || w == "2>" {
			i++ // and its target
			continue
		}
		if strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") {
			continue
		}
		out = append(out, w)
	}
	return out
}

// programArgs returns the program (sanqos or sanqos-lab) and its
// arguments if words run one of them.
func programArgs(words []string) (string, []string, bool) {
	isSanqos := func(w string) bool {
		w = w[strings.LastIndex(w, "/")+1:]
		return w == "sanqos" || w == "sanqos-lab"
	}
	i := 0
	for i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-") {
		i++ // VAR=value
	}
	if i >= len(words) {
		return "", nil, false
	}
	switch words[i] {
	case "ip":
		if len(words) > i+3 && words[i+1] == "netns" && words[i+2] == "exec" {
			i += 4
		}
	case "setpriv", "nsenter", "flock", "env", "sudo", "timeout", "time":
		for i < len(words) && !isSanqos(words[i]) {
			i++
		}
	}
	if i >= len(words) || !isSanqos(words[i]) {
		return "", nil, false
	}
	return words[i][strings.LastIndex(words[i], "/")+1:], words[i+1:], true
}

// checkCommand resolves args against the command tree: every word before
// the first flag that is not an argument must be a subcommand, and every
// flag must exist (as a flag or a deprecated alias) on the command it
// reaches. An upper-case word (COMMAND) stands for any subcommand.
func checkCommand(root *cobra.Command, args []string) []string {
	var problems []string
	cmd := root
	anySub := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if anySub && name != "help" && name != "h" {
				continue
			}
			f := lookupFlag(cmd, name, !strings.HasPrefix(a, "--"))
			if f == nil {
				problems = append(problems, "no flag "+a+" on '"+cmd.CommandPath()+"'")
				continue
			}
			if !hasValue && f.NoOptDefVal == "" && f.Value.Type() != "bool" {
				i++ // its value
			}
			continue
		}
		if anySub {
			continue
		}
		if sub := findSub(cmd, a); sub != nil {
			cmd = sub
			continue
		}
		if isPlaceholder(a) && cmd.HasAvailableSubCommands() {
			anySub = true
			continue
		}
		// Alternatives: completion bash|zsh|fish.
		if alts := strings.Split(a, "|"); len(alts) > 1 && findSub(cmd, alts[0]) != nil {
			var next *cobra.Command
			for _, alt := range alts {
				if next = findSub(cmd, alt); next == nil {
					problems = append(problems, "'"+cmd.CommandPath()+"' has no command "+alt)
					break
				}
			}
			if next == nil {
				break
			}
			cmd = findSub(cmd, alts[0])
			continue
		}
		if cmd.HasAvailableSubCommands() && (!cmd.Runnable() || cmd.ValidateArgs([]string{a}) != nil) {
			problems = append(problems, "'"+cmd.CommandPath()+"' has no command "+a)
			break
		}
		// An argument of cmd (an address, a path, an experiment).
	}
	return problems
}

func findSub(cmd *cobra.Command, name string) *cobra.Command {
	for _, s := range cmd.Commands() {
		if s.Name() == name || s.HasAlias(name) {
			return s
		}
	}
	return nil
}

func lookupFlag(cmd *cobra.Command, name string, short bool) *pflag.Flag {
	if name == "help" || (short && name == "h") {
		return &pflag.Flag{Name: "help", Value: boolValue{}}
	}
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.InheritedFlags(), cmd.PersistentFlags()} {
		if short && len(name) == 1 {
			if f := fs.ShorthandLookup(name); f != nil {
				return f
			}
			continue
		}
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// deprecatedFlags lists the flags of args that are deprecated aliases.
func deprecatedFlags(root *cobra.Command, args []string) []string {
	var out []string
	cmd := root
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			if sub := findSub(cmd, a); sub != nil {
				cmd = sub
			}
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := lookupFlag(cmd, name, !strings.HasPrefix(a, "--")); f != nil && f.Deprecated != "" {
			out = append(out, a)
		}
	}
	return out
}

func isPlaceholder(w string) bool {
	return w != "" && strings.ToUpper(w) == w && strings.ToLower(w) != w
}

type boolValue struct{}

func (boolValue) String() string   { return "false" }
func (boolValue) Set(string) error { return nil }
func (boolValue) Type() string     { return "bool" }
func (boolValue) IsBoolFlag() bool { return true }
