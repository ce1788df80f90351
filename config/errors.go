package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Error is one problem with a config, at a line.
type Error struct {
	// File is the config file (set by Load; "" from Parse).
	File  string
	Line  int
	Field string
	Msg   string
}

// Error is "FILE:N: field: msg" (the form editors and grep jump to), or
// "line N: field: msg" without a file; the line or the field is left out
// when unknown or empty (a key unknown at the top level has no field).
func (e Error) Error() string {
	s := e.Msg
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	switch {
	case e.File != "" && e.Line > 0:
		s = fmt.Sprintf("%s:%d: %s", e.File, e.Line, s)
	case e.File != "":
		s = e.File + ": " + s
	case e.Line > 0:
		s = fmt.Sprintf("line %d: %s", e.Line, s)
	}
	return s
}

// Errors are every error of a config, in the order of their lines: one
// per line of the message, so one edit of the file fixes them all.
type Errors []Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find an Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sorted is es in line order; the errors of one line keep the order in
// which they were found (a block's checks run top down).
func sorted(es []Error) Errors {
	slices.SortStableFunc(es, func(a, b Error) int { return a.Line - b.Line })
	return Errors(es)
}

// problems collects a config's errors, each at its field's line in root,
// with the value the file gives it.
type problems struct {
	root  *yaml.Node
	c     *Config
	errs  []Error
	warns []Error
}

// warn keeps w as a warning: the config stands, the agent logs it.
func (p *problems) warn(w Error) { p.warns = append(p.warns, w) }

// bad reports msg about the key at path (keys and indices from the top).
func (p *problems) bad(msg string, path ...any) { p.errs = append(p.errs, p.at(msg, nil, path...)) }

// badBare reports msg without the field's value: the field's name shows
// it (a weight's address), or msg does.
func (p *problems) badBare(msg string, path ...any) {
	p.errs = append(p.errs, Error{Line: lineOf(p.root, path...), Field: fieldName(path...), Msg: msg})
}

// by is a check of a key against the key at cause: when the file leaves
// the checked key out, the error names cause, its value and its line (the
// key the operator wrote that makes the default wrong), and is at that
// line when the key's block is not later in the file.
func (p *problems) by(cause ...any) because { return because{p, cause} }

type because struct {
	p     *problems
	cause []any
}

func (b because) bad(msg string, path ...any) {
	b.p.errs = append(b.p.errs, b.p.at(msg, b.cause, path...))
}

// at is msg about the field at path, after the field's value: as the file
// writes it (a scalar; a list or block is not repeated), else, when the
// file leaves the key out, "not set" or the value it takes by default,
// with the key at cause that the file does set.
func (p *problems) at(msg string, cause []any, path ...any) Error {
	line, n, found := lookup(p.root, path...)
	e := Error{Line: line, Field: fieldName(path...), Msg: msg}
	switch {
	case found && n != nil && n.Kind == yaml.ScalarNode:
		e.Msg = echo(n.Value) + ": " + msg
	case found:
	default:
		v, note := p.defaultOf(path...)
		if cl, cn, ok := lookup(p.root, cause...); ok && len(cause) > 0 && cn != nil && cn.Kind == yaml.ScalarNode {
			note = append(note, fmt.Sprintf("%s is %s on line %d", fieldName(cause...), echo(cn.Value), cl))
			// The later line: the cause's if it is inside the block the
			// key belongs in (discovery.interval for discovery.refresh),
			// else the block's (a resource, for its devices).
			e.Line = max(e.Line, cl)
		}
		if len(note) > 0 {
			v += " (" + strings.Join(note, "; ") + ")"
		}
		e.Msg = v + ": " + msg
	}
	return e
}

// defaultOf is how an error shows the value of a key the file leaves
// out: "not set", or the value the config took and the note "default".
func (p *problems) defaultOf(path ...any) (string, []string) {
	if p.c == nil {
		return "not set", nil
	}
	v, ok := valueAt(reflect.ValueOf(p.c).Elem(), path...)
	if !ok || v.IsZero() {
		return "not set", nil
	}
	var s string
	switch {
	case v.Type() == durationType:
		s = time.Duration(v.Int()).String()
	case v.Kind() == reflect.Float64:
		s = strconv.FormatFloat(v.Float(), 'g', -1, 64)
	default:
		s = fmt.Sprint(v.Interface())
	}
	return echo(s), []string{"default"}
}

// valueAt is the field of config value v at a YAML path.
func valueAt(v reflect.Value, path ...any) (reflect.Value, bool) {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			if v.Kind() != reflect.Struct {
				return v, false
			}
			f, ok := fieldByTag(v.Type(), k)
			if !ok {
				return v, false
			}
			v = v.FieldByIndex(f.Index)
		case int:
			if v.Kind() != reflect.Slice || k >= v.Len() {
				return v, false
			}
			v = v.Index(k)
		default:
			return v, false
		}
	}
	return v, true
}

// echo is a value as an error shows it: as written, or quoted when empty
// or when it has spaces, quotes or ": " that would blur where it ends.
func echo(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"") || strings.Contains(s, ": ") {
		return strconv.Quote(s)
	}
	return s
}

func fieldName(path ...any) string {
	var b strings.Builder
	for _, p := range path {
		switch v := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(v)
		case int:
			fmt.Fprintf(&b, "[%d]", v)
		}
	}
	return b.String()
}

// lineOf finds the line of a field in the YAML tree: that of the nearest
// enclosing field if it is not there (0 if none is: the value came from
// the defaults).
func lineOf(root *yaml.Node, path ...any) int {
	line, _, _ := lookup(root, path...)
	return line
}

// inFile says whether the file sets the field at path (to anything,
// null included).
func inFile(root *yaml.Node, path ...any) bool {
	_, _, ok := lookup(root, path...)
	return ok
}

// lookup is lineOf and inFile, and the field's value node when found.
func lookup(root *yaml.Node, path ...any) (line int, value *yaml.Node, found bool) {
	n := root
	if n == nil {
		return 0, nil, false
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, p := range path {
		switch v := p.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return line, nil, false
			}
			hit := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == v {
					line = n.Content[i].Line
					n = n.Content[i+1]
					hit = true
					break
				}
			}
			if !hit {
				return line, nil, false
			}
		case int:
			if n.Kind != yaml.SequenceNode || v >= len(n.Content) {
				return line, nil, false
			}
			n = n.Content[v]
			line = n.Line
		}
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
	}
	return line, n, true
}
