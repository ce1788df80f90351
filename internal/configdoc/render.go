package main

import (
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/config"
	"gopkg.in/yaml.v3"
)

// intro is the page's text before the keys' table (and its head); its
// {{restart keys}} is the keys that need a restart.
//
//go:embed intro.md
var intro string

// generate returns the page for the config package whose source is in dir.
func generate(dir string) ([]byte, error) {
	keys, err := schema(dir)
	if err != nil {
		return nil, err
	}
	defs, err := defaults(keys)
	if err != nil {
		return nil, err
	}
	if err := complete(keys); err != nil {
		return nil, err
	}

	var b strings.Builder
	b.WriteString(strings.Replace(intro, "{{restart keys}}", restartKeys(), 1))
	for _, k := range keys {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s |\n", k.Path, anchor(k.Path), typeText(k), cell(defs[k.Path]))
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "\n## `%s`\n\n", k.Path)
		fmt.Fprintf(&b, "Type: %s. Default: %s.\n\n", typeText(k), defs[k.Path])
		b.WriteString(k.Doc)
		b.WriteString("\n")
		if n := notes[k.Path]; n != "" {
			fmt.Fprintf(&b, "\n%s\n", n)
		}
		if len(k.Checks) > 0 {
			fmt.Fprintf(&b, "\nChecked: %s.\n", quoteAll(k.Checks))
		}
		fmt.Fprintf(&b, "\n```yaml\n%s```\n", examples[k.Path])
	}
	return []byte(b.String()), nil
}

// complete checks that every key has a doc comment and an example, and
// that the generator's own tables (examples, defaultText, notes) name only
// keys of the config.
func complete(keys []key) error {
	var problems []error
	for _, k := range keys {
		if k.Doc == "" {
			problems = append(problems, fmt.Errorf("%s (config.%s): no doc comment", k.Path, k.GoName))
		}
		if examples[k.Path] == "" {
			problems = append(problems, fmt.Errorf("%s: no example in internal/configdoc/examples.go", k.Path))
		}
	}
	for p := range examples {
		if !slices.ContainsFunc(keys, func(k key) bool { return k.Path == p }) {
			problems = append(problems, fmt.Errorf("examples.go: %s is no key of the config", p))
		}
	}
	for p := range defaultText {
		if !slices.ContainsFunc(keys, func(k key) bool { return k.Path == p }) {
			problems = append(problems, fmt.Errorf("examples.go: defaultText names %s, no key of the config", p))
		}
	}
	for p := range notes {
		if !slices.ContainsFunc(keys, func(k key) bool { return k.Path == p }) {
			problems = append(problems, fmt.Errorf("examples.go: notes names %s, no key of the config", p))
		}
	}
	return errors.Join(problems...)
}

// anchor is the id GitHub gives the heading "`path`".
func anchor(path string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(path) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func quoteAll(msgs []string) string {
	q := make([]string, len(msgs))
	for i, m := range msgs {
		q[i] = "“" + m + "”"
	}
	return strings.Join(q, "; ")
}

func typeText(k key) string {
	switch k.Kind {
	case "time.Duration":
		return "duration"
	case "float64":
		switch {
		case strings.HasSuffix(k.Name, "mb_s"):
			return "number, MB/s"
		case k.Name == "bytes":
			return "number, bytes"
		case k.Name == "ios":
			return "number, I/Os"
		case k.Name == "iops":
			return "number, I/Os per second"
		}
		return "number"
	case "int":
		return "integer"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "[]string":
		return "list of strings"
	case "[]int":
		return "list of integers"
	case "map[string]float64":
		return "map: address → number"
	case "map[string][]string":
		return "map: address → list of strings"
	case "struct":
		return "mapping"
	case "list of structs":
		return "list of mappings"
	}
	return "`" + k.Kind + "`"
}

// probes are the configs whose parsed values are the defaults: the empty
// file for the top level, and one resource per policy for the keys of a
// resource, its classes and its reservations (a key a probe sets itself
// is not read from it).
var probes = []struct{ policy, yaml string }{
	{"read-over-write", "resources: [{name: vg1}]"},
	{"important-sets", "resources: [{name: vg1, policy: important-sets}]"},
	{"weighted", "resources: [{name: vg1, policy: weighted}]"},
	{"slo-classes", "resources: [{name: vg1, policy: slo-classes, classes: [{name: c, members: [10.0.0.2]}]}]"},
	{"reservations", "resources: [{name: vg1, policy: reservations, reservations: [{consumer: 10.0.0.2, bytes: 1000000, period: 1s}]}]"},
}

// defaults renders each key's default from what config.Parse makes of
// the probes, unless defaultText says it in words.
func defaults(keys []key) (map[string]string, error) {
	top, err := config.Parse(nil)
	if err != nil {
		return nil, fmt.Errorf("the empty config: %w", err)
	}
	ps, err := parseProbes()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	topByName := map[string]key{}
	for _, k := range keys {
		if !strings.Contains(k.Path, ".") {
			topByName[k.Path] = k
		}
	}
	for _, k := range keys {
		if t, ok := defaultText[k.Path]; ok {
			out[k.Path] = t
			continue
		}
		switch k.Kind {
		case "struct":
			out[k.Path] = "see its keys"
			continue
		case "list of structs":
			out[k.Path] = "none"
			continue
		}
		if !slices.Contains(k.Index, -1) {
			v, _ := value(reflect.ValueOf(top).Elem(), k.Index)
			out[k.Path] = format(v)
			continue
		}
		s, err := resourceDefault(k, ps, top, topByName)
		if err != nil {
			return nil, err
		}
		out[k.Path] = s
	}
	return out, nil
}

// probed is a probe's config as config.Parse makes it.
type probed struct {
	policy string
	c      *config.Config
	set    map[string]bool // yaml paths the probe sets itself
}

// parseProbes parses every probe.
func parseProbes() ([]probed, error) {
	var ps []probed
	for _, p := range probes {
		c, err := config.Parse([]byte(p.yaml))
		if err != nil {
			return nil, fmt.Errorf("probe %q: %w", p.yaml, err)
		}
		ps = append(ps, probed{p.policy, c, setPaths([]byte(p.yaml))})
	}
	return ps, nil
}

// resourceDefault renders the default of k, a key of a resource (or of
// its classes or reservations): its value in each probe that has it and
// does not set it, per policy where they differ, and as the top-level key
// of its name (top's, found in topByName) where that gives it.
func resourceDefault(k key, ps []probed, top *config.Config, topByName map[string]key) (string, error) {
	byValue := map[string][]string{}
	var order []string
	for _, p := range ps {
		if p.set[k.Path] {
			continue
		}
		v, ok := value(reflect.ValueOf(p.c).Elem(), k.Index)
		if !ok {
			continue
		}
		s := format(v)
		if byValue[s] == nil {
			order = append(order, s)
		}
		byValue[s] = append(byValue[s], p.policy)
	}
	switch {
	case len(order) == 0:
		return "", fmt.Errorf("%s: no probe has it; add one", k.Path)
	case len(order) == 1:
		s := order[0]
		if t, ok := topByName[k.Name]; ok && !slices.Contains(t.Index, -1) {
			if v, _ := value(reflect.ValueOf(top).Elem(), t.Index); format(v) == s && s != "none" {
				s = fmt.Sprintf("the top-level [`%s`](#%s) (%s)", t.Path, anchor(t.Path), s)
			}
		}
		return s, nil
	default:
		var parts []string
		for _, s := range order[1:] {
			parts = append(parts, fmt.Sprintf("%s with policy %s", s, policyList(byValue[s])))
		}
		return strings.Join(parts, "; ") + "; otherwise " + order[0], nil
	}
}

func policyList(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = "`" + p + "`"
	}
	return strings.Join(q, ", ")
}

// value follows index from v (-1: the list's first element).
func value(v reflect.Value, index []int) (reflect.Value, bool) {
	for _, i := range index {
		if i == -1 {
			if v.Len() == 0 {
				return reflect.Value{}, false
			}
			v = v.Index(0)
			continue
		}
		v = v.Field(i)
	}
	return v, true
}

func format(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		return "`" + duration(d) + "`"
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return "none"
		}
		return "`" + v.String() + "`"
	case reflect.Float64:
		return "`" + strconv.FormatFloat(v.Float(), 'f', -1, 64) + "`"
	case reflect.Int:
		return "`" + strconv.FormatInt(v.Int(), 10) + "`"
	case reflect.Bool:
		return "`" + strconv.FormatBool(v.Bool()) + "`"
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "none"
		}
		b, err := yaml.Marshal(v.Interface())
		if err != nil {
			return "`" + fmt.Sprint(v.Interface()) + "`"
		}
		var flow []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			flow = append(flow, strings.TrimPrefix(l, "- "))
		}
		return "`[" + strings.Join(flow, ", ") + "]`"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// duration writes d as an operator would: 100ms, 0.5ms, 10s.
func duration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
}

// setPaths lists the yaml paths (in the page's form) a document sets.
func setPaths(doc []byte) map[string]bool {
	var n yaml.Node
	out := map[string]bool{}
	if yaml.Unmarshal(doc, &n) != nil || len(n.Content) == 0 {
		return out
	}
	var rec func(n *yaml.Node, prefix string)
	rec = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := prefix + n.Content[i].Value
				out[p] = true
				rec(n.Content[i+1], p+".")
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				rec(c, strings.TrimSuffix(prefix, ".")+"[].")
			}
		}
	}
	rec(n.Content[0], "")
	return out
}

// restartKeys lists config.RestartKeys for the page, wrapped as prose:
// the agent's Reload refuses exactly these.
func restartKeys() string {
	var ks []string
	for _, k := range config.RestartKeys() {
		if k == "token" {
			ks = append(ks, "the token (`token_file`'s content)")
			continue
		}
		ks = append(ks, "`"+k+"`")
	}
	return wrap(strings.Join(ks, ", "), 72)
}

// wrap breaks s into lines of at most width bytes at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n")
			n = 0
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
