package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// key is one YAML key of the agent's config as the schema declares it.
type key struct {
	Path   string   // yaml path: discovery.source, resources[].threshold
	Name   string   // the last element: source, threshold
	GoName string   // the Go field: Source, Threshold
	Kind   string   // scalar Go type, "struct", "list of structs", or a composite
	Doc    string   // the field's doc comment (or the struct type's), one paragraph per blank line
	Checks []string // the validator's messages about this key, in source order
	// Index is the key's position in the Go value: the field indices from
	// config.Config down, -1 for "an element of the list".
	Index []int
}

// schema reads package config's source in dir and returns every YAML key
// reachable from Config, in declaration order (a struct's keys follow the
// key that holds it), each with its doc comment and the validator's
// literal messages. It is one function because its walk is a closure
// that recurses through config's struct types over the type and
// validator tables it builds first; split, they would be passed around
// whole.
func schema(dir string) ([]key, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	structs := map[string]*ast.TypeSpec{}
	docs := map[string]*ast.CommentGroup{}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		af, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = ts
					docs[ts.Name.Name] = ts.Doc
					if ts.Doc == nil && len(g.Specs) == 1 {
						docs[ts.Name.Name] = g.Doc
					}
				}
			}
		}
	}
	if structs["Config"] == nil {
		return nil, fmt.Errorf("%s: no type Config", dir)
	}
	var keys []key
	var walk func(typeName, prefix string, index []int) error
	walk = func(typeName, prefix string, index []int) error {
		st := structs[typeName].Type.(*ast.StructType)
		goToYAML := map[string]string{}
		i := -1
		type field struct {
			name string
			f    *ast.Field
			idx  int
		}
		var fields []field
		for _, f := range st.Fields.List {
			for _, n := range f.Names {
				i++
				fields = append(fields, field{n.Name, f, i})
			}
			if len(f.Names) == 0 {
				i++
			}
		}
		for _, fl := range fields {
			if y := yamlName(fl.f); y != "" {
				goToYAML[fl.name] = y
			}
		}
		for _, fl := range fields {
			y := yamlName(fl.f)
			if y == "" || !ast.IsExported(fl.name) {
				continue
			}
			k := key{Path: prefix + y, Name: y, GoName: fl.name, Index: append(append([]int{}, index...), fl.idx)}
			doc := fl.f.Doc.Text()
			if doc == "" {
				doc = fl.f.Comment.Text()
			}
			inner := ""
			switch t := fl.f.Type.(type) {
			case *ast.Ident:
				if structs[t.Name] != nil {
					k.Kind, inner = "struct", t.Name
				} else {
					k.Kind = t.Name
				}
			case *ast.SelectorExpr:
				k.Kind = exprString(t)
			case *ast.ArrayType:
				if id, ok := t.Elt.(*ast.Ident); ok && structs[id.Name] != nil {
					k.Kind, inner = "list of structs", id.Name
				} else {
					k.Kind = "[]" + exprString(t.Elt)
				}
			case *ast.MapType:
				k.Kind = "map[" + exprString(t.Key) + "]" + exprString(t.Value)
			default:
				return fmt.Errorf("%s: unsupported type %T", k.Path, t)
			}
			if doc == "" {
				// A comment over several fields documents each one it
				// names: "IOPS and MBs are floors ...".
				for _, prev := range fields[:slices.IndexFunc(fields, func(f field) bool { return f.name == fl.name })] {
					if t := prev.f.Doc.Text(); containsWord(t, fl.name) {
						doc = t
					}
				}
			}
			if doc == "" && inner != "" {
				doc = docs[inner].Text()
			}
			k.Doc = goNamesToYAML(doc, goToYAML)
			keys = append(keys, k)
			switch k.Kind {
			case "struct":
				if err := walk(inner, k.Path+".", k.Index); err != nil {
					return err
				}
			case "list of structs":
				if err := walk(inner, k.Path+"[].", append(k.Index, -1)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("Config", "", nil); err != nil {
		return nil, err
	}
	checks := validatorMessages(parsed)
	for i := range keys {
		keys[i].Checks = checks[keys[i].Path]
	}
	return keys, nil
}

func yamlName(f *ast.Field) string {
	if f.Tag == nil {
		return ""
	}
	tag, err := strconv.Unquote(f.Tag.Value)
	if err != nil {
		return ""
	}
	name, _, _ := strings.Cut(reflect.StructTag(tag).Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func exprString(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return exprString(t.X) + "." + t.Sel.Name
	case *ast.ArrayType:
		return "[]" + exprString(t.Elt)
	case *ast.MapType:
		return "map[" + exprString(t.Key) + "]" + exprString(t.Value)
	}
	return fmt.Sprintf("%T", e)
}

// goNamesToYAML turns a Go doc comment into the page's prose: paragraphs
// joined into single lines, and the struct's Go field names (Devices,
// ThrottleableQueue) written as their YAML keys (`devices`,
// `throttleable_queue`).
func goNamesToYAML(doc string, names map[string]string) string {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(doc), "\n\n") {
		words := strings.Fields(p)
		for i, w := range words {
			// "Devices,", "TokenFile's" and "(WriteMBs" keep their
			// punctuation.
			core := strings.TrimRight(w, ".,;:)")
			core = strings.TrimSuffix(core, "'s")
			lead := ""
			if strings.HasPrefix(core, "(") {
				lead, core = "(", core[1:]
			}
			if y, ok := names[core]; ok && core != strings.ToLower(core) {
				rest := strings.TrimPrefix(w, lead+core)
				words[i] = lead + "`" + y + "`" + rest
			}
		}
		paras = append(paras, strings.Join(words, " "))
	}
	return strings.Join(paras, "\n\n")
}

// validatorMessages finds the validator's calls bad("message", "key", i,
// "key"...) (and p.bad, p.badBare) whose message is a string literal and returns the
// messages by YAML path: string arguments are keys, anything else an index
// or a map key.
func validatorMessages(files []*ast.File) map[string][]string {
	out := map[string][]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				if fn.Name != "bad" {
					return true
				}
			case *ast.SelectorExpr:
				if fn.Sel.Name != "bad" && fn.Sel.Name != "badBare" {
					return true
				}
			default:
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			msg, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			var path []string
			for _, a := range call.Args[1:] {
				if l, ok := a.(*ast.BasicLit); ok && l.Kind == token.STRING {
					s, _ := strconv.Unquote(l.Value)
					path = append(path, s)
				} else {
					path = append(path, "[]")
				}
			}
			for len(path) > 0 && path[len(path)-1] == "[]" {
				path = path[:len(path)-1]
			}
			p := strings.ReplaceAll(strings.Join(path, "."), ".[]", "[]")
			for _, m := range out[p] {
				if m == msg {
					return true
				}
			}
			out[p] = append(out[p], msg)
			return true
		})
	}
	return out
}

// containsWord reports whether text has w as a whole word.
func containsWord(text, w string) bool {
	for _, f := range strings.FieldsFunc(text, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		if f == w {
			return true
		}
	}
	return false
}
