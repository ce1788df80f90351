package config

import (
	"bytes"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// syntaxError is yaml.v3's syntax error err about file b at the line it
// is on, with that line's text and what usually causes it.
//
// yaml.v3 reports the line where the construct around the error starts
// (libyaml's context mark: the list or block being parsed), not the
// error's own (the problem mark), and for the parser's errors that line
// counted from 0: a key indented one space short on line 5, in a list
// whose entry starts on line 3, is "line 2: did not find expected '-'
// indicator". The error's own line is found instead as the first whose
// part of the file up to it fails as the whole file does: the parser
// reads the file in one pass, so up to the line before the error's it
// meets the end of the file where it met the error, and from that line on
// it fails the same way. The search is a bisection (a 1 MB file takes
// about 20 parses); the reported context line bounds it from below.
func syntaxError(b []byte, err error) error {
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "yaml: ")
	if !ok {
		return err
	}
	ctx := 1
	if r, ok := strings.CutPrefix(rest, "line "); ok {
		if n, problem, ok := strings.Cut(r, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				ctx, rest = max(l, 1), problem
			}
		}
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	fails := func(n int) bool {
		var node yaml.Node
		e := yaml.Unmarshal(bytes.Join(lines[:n], nil), &node)
		return e != nil && e.Error() == msg
	}
	lo, hi := min(ctx, len(lines)), len(lines)
	for lo < hi {
		if mid := (lo + hi) / 2; fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if hi < 1 {
		return Errors{{Msg: "not YAML: " + rest}}
	}
	text := strings.TrimRight(string(lines[hi-1]), "\r\n")
	m := "not YAML: " + strconv.Quote(text) + ": " + rest
	if h := syntaxHint(text, rest); h != "" {
		m += " (" + h + ")"
	}
	return Errors{{Line: hi, Msg: m}}
}

// syntaxHint is the usual cause of yaml.v3's problem on a line of text.
func syntaxHint(text, problem string) string {
	indent := text[:len(text)-len(strings.TrimLeft(text, " \t"))]
	switch {
	case strings.Contains(indent, "\t"):
		return "a tab indents it: YAML indents with spaces only"
	case strings.Contains(problem, "end of stream") && strings.ContainsAny(text, `"'`):
		return "a quote opened on this line is not closed"
	case strings.Contains(problem, "expected ',' or ']'"):
		return "a [ opened on this line is not closed"
	case strings.Contains(problem, "expected ',' or '}'"):
		return "a { opened on this line is not closed"
	case strings.HasPrefix(strings.TrimSpace(text), "-") && !strings.HasPrefix(strings.TrimSpace(text)+" ", "- "):
		return "a list entry wants a space after its -"
	case strings.Contains(problem, "could not find expected ':'"):
		return "want key: value"
	case strings.Contains(problem, "did not find expected key"),
		strings.Contains(problem, "did not find expected '-' indicator"),
		strings.Contains(problem, "mapping values are not allowed"):
		return "indent it as the other keys of its block, or the entries of its list"
	}
	return ""
}
