package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Generate regenerates the plots of a results directory (a lab or sim
// run: summary.json, and trace.csv when present) and writes a one-page,
// self-contained report.html next to them: run metadata, the summary as
// tables, and every figure, embedded. It returns the report's path.
//
// It knows nothing of how a run was made. Any summary.json renders: its
// scalars as one table (nested objects as dotted names), each array of
// objects as a table of its own. An experiment that declared plots
// (RegisterPlots, by the summary's "experiment" field) gets them drawn
// from the summary; a trace.csv
// in the lab's format gets read-wait and write-rate plots per phase.
// Figures already in the directory (the run's own) are included as they
// are. Files it writes are named report*.
func Generate(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return "", fmt.Errorf("no run here: %w", err)
	}
	sum, err := decodeOrdered(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, "summary.json"), err)
	}
	obj, ok := sum.(object)
	if !ok {
		return "", fmt.Errorf("%s: not a JSON object", filepath.Join(dir, "summary.json"))
	}
	experiment, _ := obj.get("experiment").(string)
	var plots []string
	var notes []string
	if p, err := summaryPlots(dir, experiment, obj); err != nil {
		notes = append(notes, "summary plots: "+err.Error())
	} else {
		plots = append(plots, p...)
	}
	tr := filepath.Join(dir, "trace.csv")
	if _, err := os.Stat(tr); err == nil {
		thr := thresholds(obj)
		if p, err := tracePlots(dir, tr, thr); err != nil {
			notes = append(notes, "trace plots: "+err.Error())
		} else {
			plots = append(plots, p...)
		}
	}
	own, _ := filepath.Glob(filepath.Join(dir, "*.png"))
	sort.Strings(own)
	// The regenerated plots first, then the run's own figures.
	var figs []figure
	seen := map[string]bool{}
	for _, p := range append(plots, own...) {
		base := filepath.Base(p)
		if seen[base] {
			continue
		}
		seen[base] = true
		b, err := os.ReadFile(filepath.Join(dir, base))
		if err != nil {
			continue
		}
		figs = append(figs, figure{Name: base, Src: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b))})
	}
	page := reportPage{
		Title:      titleOf(dir, experiment),
		Dir:        dir,
		Experiment: experiment,
		Generated:  time.Now().UTC().Format(time.RFC3339),
		Figures:    figs,
		Notes:      notes,
	}
	page.Scalars, page.Tables = tables(obj)
	page.Files = listFiles(dir)
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, page); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "report.html")
	return out, os.WriteFile(out, buf.Bytes(), 0o644)
}

func titleOf(dir, experiment string) string {
	abs, _ := filepath.Abs(dir)
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r // a `latest` link names its run
	}
	run := filepath.Base(abs)
	if experiment == "" {
		return run
	}
	return experiment + " — " + run
}

// ---- page ---------------------------------------------------------------------

type figure struct {
	Name string
	Src  template.URL
}

type fileInfo struct {
	Name string
	Size string
}

type reportPage struct {
	Title, Dir, Experiment, Generated string
	Scalars                           []row
	Tables                            []table
	Figures                           []figure
	Files                             []fileInfo
	Notes                             []string
}

func listFiles(dir string) []fileInfo {
	ents, _ := os.ReadDir(dir)
	var out []fileInfo
	for _, e := range ents {
		if e.Name() == "report.html" {
			continue
		}
		size := "dir"
		if i, err := e.Info(); err == nil && !e.IsDir() {
			size = fmt.Sprintf("%.1f KB", float64(i.Size())/1e3)
		}
		out = append(out, fileInfo{e.Name(), size})
	}
	return out
}

var pageTmpl = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: .2em .8em; text-align: left; font-variant-numeric: tabular-nums; }
th { background: #eceff1; }
.meta td:first-child, .scalars td:first-child { color: #555; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #666; font-size: .9em; }
.note { color: #b71c1c; }
.wide { overflow-x: auto; }
@media print { figure { page-break-inside: avoid; } }
</style></head><body>
<h1>{{.Title}}</h1>
<table class="meta">
<tr><td>experiment</td><td>{{if .Experiment}}{{.Experiment}}{{else}}(not named in summary.json){{end}}</td></tr>
<tr><td>results directory</td><td><code>{{.Dir}}</code></td></tr>
<tr><td>report generated</td><td>{{.Generated}} by <code>sanqos-lab report</code></td></tr>
</table>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}
<h2>Summary</h2>
<table class="scalars">{{range .Scalars}}<tr><td>{{.Key}}</td><td>{{.Val}}</td></tr>{{end}}</table>
{{range .Tables}}<h2>{{.Name}}</h2>
<div class="wide"><table><tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table></div>
{{end}}
{{if .Figures}}<h2>Figures</h2>{{end}}
{{range .Figures}}<figure><img src="{{.Src}}" alt="{{.Name}}"><figcaption>{{.Name}}</figcaption></figure>
{{end}}
<h2>Files</h2>
<table>{{range .Files}}<tr><td>{{.Name}}</td><td>{{.Size}}</td></tr>{{end}}</table>
</body></html>
`))
