package config

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/editdist"
	"gopkg.in/yaml.v3"
)

// decodeErrors says, at its line and key, why each part of the YAML in
// root does not decode into a Config: an unknown key (with the nearest
// known one, or the block it belongs in) or a value of the wrong kind (a
// bare number where a duration is due). yaml.v3's own messages name
// neither the key nor its block ("field treshold not found in type
// config.Config", "cannot unmarshal !!int `15` into time.Duration").
// Parse calls it only once yaml.v3 has refused the document, so what it
// walks has passed yaml.v3's limits on aliases.
func decodeErrors(root *yaml.Node) []Error {
	w := &schemaWalk{seen: map[visit]bool{}}
	w.node(root, reflect.TypeFor[Config](), nil)
	return w.errs
}

type visit struct {
	n *yaml.Node
	t reflect.Type
}

// schemaWalk walks a YAML tree along the Go type it decodes into. Each
// (node, type) is visited once, so an alias used many times costs one
// visit.
type schemaWalk struct {
	seen map[visit]bool
	errs []Error
}

var durationType = reflect.TypeFor[time.Duration]()

func (w *schemaWalk) bad(n *yaml.Node, msg string, path []any) {
	w.errs = append(w.errs, Error{Line: n.Line, Field: fieldName(path...), Msg: msg})
}

func (w *schemaWalk) node(n *yaml.Node, t reflect.Type, path []any) {
	path = path[:len(path):len(path)] // appends below copy: siblings never share
	if n = resolved(n); n == nil || n.Tag == "!!null" || w.seen[visit{n, t}] {
		return
	}
	w.seen[visit{n, t}] = true
	switch {
	case t == durationType:
		w.duration(n, path)
	case t.Kind() == reflect.Struct:
		w.mapping(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.bad(n, withScalar(n, "want a list, e.g. [a, b]"), path)
			return
		}
		for i, c := range n.Content {
			w.node(c, t.Elem(), append(path, i))
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.bad(n, withScalar(n, "want a mapping of key: value"), path)
			return
		}
		keys := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if w.twice(keys, k, append(path, k.Value)) {
				continue
			}
			w.node(n.Content[i+1], t.Elem(), append(path, k.Value))
		}
	default:
		w.scalar(n, t, path)
	}
}

// withScalar is msg after n's value if n is a scalar (devices: sdb: want
// a list): a list or block is not repeated.
func withScalar(n *yaml.Node, msg string) string {
	if n.Kind == yaml.ScalarNode {
		return echo(n.Value) + ": " + msg
	}
	return msg
}

// duration accepts what yaml.v3 decodes into a time.Duration: a string
// time.ParseDuration takes. A bare number has no unit to take.
func (w *schemaWalk) duration(n *yaml.Node, path []any) {
	const want = "want a duration with a unit, e.g. 15ms"
	switch {
	case n.Kind != yaml.ScalarNode:
		w.bad(n, want, path)
	case n.Tag == "!!int" || n.Tag == "!!float":
		w.bad(n, fmt.Sprintf("%s is a bare number: %s", n.Value, want), path)
	default:
		if _, err := time.ParseDuration(n.Value); err != nil {
			w.bad(n, fmt.Sprintf("%q: %s", n.Value, want), path)
		}
	}
}

// scalar decodes n into a t the way yaml.v3 does, and names the kind of
// value t wants when it fails.
func (w *schemaWalk) scalar(n *yaml.Node, t reflect.Type, path []any) {
	want := map[reflect.Kind]string{reflect.Bool: "true or false", reflect.String: "a string",
		reflect.Float32: "a number", reflect.Float64: "a number"}[t.Kind()]
	want = cmp.Or(want, "a whole number")
	if n.Kind != yaml.ScalarNode {
		w.bad(n, "want "+want+", not a list or mapping", path)
		return
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		w.bad(n, fmt.Sprintf("%q: want %s", n.Value, want), path)
	}
}

// mapping checks a block's keys against struct t's yaml tags.
func (w *schemaWalk) mapping(n *yaml.Node, t reflect.Type, path []any) {
	if n.Kind != yaml.MappingNode {
		w.bad(n, withScalar(n, "want a block of key: value"), path)
		return
	}
	keys := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.Tag == "!!merge" { // a merged block: its keys are this block's
			if v.Kind == yaml.SequenceNode {
				for _, m := range v.Content {
					w.node(m, t, path)
				}
			} else {
				w.node(v, t, path)
			}
			continue
		}
		f, ok := fieldByTag(t, k.Value)
		if !ok {
			w.bad(k, unknownKey(k.Value, t), path)
			continue
		}
		if w.twice(keys, k, append(path, k.Value)) {
			continue
		}
		w.node(v, f.Type, append(path, k.Value))
	}
}

// twice reports key k if keys has it already (yaml.v3 refuses a key set
// twice in one block, and says so without naming the block), and adds it.
func (w *schemaWalk) twice(keys map[string]int, k *yaml.Node, path []any) bool {
	if first, dup := keys[k.Value]; dup {
		w.bad(k, fmt.Sprintf("set twice: also on line %d (delete one)", first), path)
		return true
	}
	keys[k.Value] = k.Line
	return false
}

// typeErrors are yaml.v3's own messages ("line N: ..."), as Errors, for
// what the walk does not know.
func typeErrors(te *yaml.TypeError) []Error {
	var out []Error
	for _, s := range te.Errors {
		e := Error{Msg: s}
		if rest, ok := strings.CutPrefix(s, "line "); ok {
			if n, msg, ok := strings.Cut(rest, ": "); ok {
				if line, err := strconv.Atoi(n); err == nil {
					e = Error{Line: line, Msg: msg}
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// fieldByTag is t's field whose yaml key is key.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); yamlKey(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKey is a field's key in the YAML ("" for none).
func yamlKey(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

// keysOf is struct t's yaml keys, in the order of its fields.
func keysOf(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if k := yamlKey(t.Field(i)); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// unknownKey says key is not one of block t's, and what it could be: the
// nearest key of the block (a typo), or the block that has it (a key put
// at the wrong level), or else where every key is listed.
func unknownKey(key string, t reflect.Type) string {
	msg := fmt.Sprintf("unknown key %q", key)
	var homes []string
	for _, b := range blocks() {
		if b.t != t && slices.Contains(keysOf(b.t), key) {
			homes = append(homes, b.name)
		}
	}
	near := nearest(key, keysOf(t))
	switch {
	case near != "" && len(homes) > 0:
		return msg + fmt.Sprintf(" here (did you mean %q? %q is a key of %s)", near, key, strings.Join(homes, " and of "))
	case near != "":
		return msg + fmt.Sprintf(" (did you mean %q?)", near)
	case len(homes) > 0:
		return msg + " here: it is a key of " + strings.Join(homes, " and of ")
	}
	if keys := keysOf(t); len(keys) <= 8 {
		return msg + " (want " + strings.Join(keys, ", ") + ")"
	}
	return msg + " (examples/sanqos.yaml lists every key)"
}

// block is one kind of block in the config, named as an operator sees it.
type block struct {
	name string
	t    reflect.Type
}

func blocks() []block {
	return []block{
		{"the top level", reflect.TypeFor[Config]()},
		{"discovery:", reflect.TypeFor[Discovery]()},
		{"pid:", reflect.TypeFor[PID]()},
		{"each resources: entry", reflect.TypeFor[Resource]()},
		{"each classes: entry of a resource", reflect.TypeFor[Class]()},
		{"each reservations: entry of a resource", reflect.TypeFor[Reservation]()},
	}
}

// nearest is the candidate closest to s by edit distance, ignoring case,
// if close enough to be a typo of it: at most 2 edits, or a third of its
// length for longer keys ("" if none is).
func nearest(s string, candidates []string) string {
	best, bestD := "", max(2, len(s)/3)+1
	for _, c := range candidates {
		if d := editdist.Distance(strings.ToLower(s), c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}
