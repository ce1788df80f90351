package main

import (
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/sanqos/sanqos/"

// The package map in docs/architecture.md is the page a new engineer reads
// first, so it must not drift from the code: every package of the module
// has a row, and each row's "imports (sanqos)" column is exactly the
// module's packages its non-test files import (what go list reports), so
// a new import across the pipeline shows up in review as a change to the
// map. "all of the above" (cmd/sanqos) is not checked.
func TestArchitecturePackageMap(t *testing.T) {
	rows := packageMapRows(t, "../../docs/architecture.md")
	documented := map[string]bool{}
	for _, r := range rows {
		got := map[string]bool{}
		for _, p := range r.pkgs {
			documented[p] = true
			for _, imp := range moduleImports(t, filepath.Join("../..", p)) {
				if imp != p {
					got[imp] = true
				}
			}
		}
		if r.all {
			continue
		}
		if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(r.imports)); !slices.Equal(g, w) {
			t.Errorf("docs/architecture.md row %v: imports (sanqos) %v, go list says %v", r.pkgs, w, g)
		}
	}
	for _, p := range modulePackages(t) {
		if !documented[p] {
			t.Errorf("package %s has no row in docs/architecture.md's package map", p)
		}
	}
}

// Each package's doc comment says what it may import, in a line
// "Imports (sanqos): a, b." (or "none."), and that line is what its
// non-test files import: a new dependency across the pipeline changes the
// package's own doc in the same commit.
func TestPackageDocsSayTheirImports(t *testing.T) {
	re := regexp.MustCompile(`Imports \(sanqos\): ([^.]*)\.`)
	for _, p := range modulePackages(t) {
		doc := packageDoc(t, filepath.Join("../..", p))
		m := re.FindStringSubmatch(strings.Join(strings.Fields(doc), " "))
		if m == nil {
			t.Errorf("package %s: its doc comment has no \"Imports (sanqos): ...\" line", p)
			continue
		}
		var said []string
		if m[1] != "none" {
			said = strings.Split(m[1], ", ")
		}
		sort.Strings(said)
		got := moduleImports(t, filepath.Join("../..", p))
		sort.Strings(got)
		if !slices.Equal(said, got) {
			t.Errorf("package %s: its doc says it imports %v, its files import %v", p, said, got)
		}
	}
}

// packageDoc is the doc comment of dir's package (the file that has one).
func packageDoc(t *testing.T, dir string) string {
	t.Helper()
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	fset := token.NewFileSet()
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			return f.Doc.Text()
		}
	}
	t.Errorf("%s: no package doc comment", dir)
	return ""
}

type mapRow struct {
	pkgs    []string
	imports map[string]bool
	all     bool // "all of the above"
}

var backticked = regexp.MustCompile("`([a-z0-9/-]+)`")

// packageMapRows reads the table whose header starts "| package | job |".
func packageMapRows(t *testing.T, path string) []mapRow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []mapRow
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| package | job |"):
			in = true
			continue
		case !in || strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "|"):
			if len(rows) > 0 {
				return rows
			}
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("package map row with %d cells: %s", len(cells), line)
		}
		r := mapRow{imports: map[string]bool{}, all: strings.Contains(cells[3], "all of the above")}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			r.pkgs = append(r.pkgs, m[1])
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[3], -1) {
			r.imports[m[1]] = true
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no package map", path)
	}
	return rows
}

// moduleImports is the module's packages that dir's non-test files
// import, relative to the module root.
func moduleImports(t *testing.T, dir string) []string {
	t.Helper()
	p, err := build.ImportDir(dir, 0)
	if _, ok := err.(*build.NoGoError); ok {
		return nil // grafana: a dashboard, no Go
	}
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	var out []string
	for _, imp := range p.Imports {
		if rel, ok := strings.CutPrefix(imp, module); ok {
			out = append(out, rel)
		}
	}
	return out
}

// modulePackages is every directory of the module with non-test Go files
// (testdata and results excepted), relative to the root.
func modulePackages(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (d.Name() == "testdata" || d.Name() == "results" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, _ := filepath.Rel("../..", filepath.Dir(path))
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(seen))
}
