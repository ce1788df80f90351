package report

import (
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Generate regenerates the plots of a results directory (a lab or sim
// run: summary.json, and trace.csv when present) and writes a one-page,
// self-contained report.html next to them: run metadata, the summary as
// tables, and every figure, embedded. It returns the report's path.
//
// It knows nothing of how a run was made. Any summary.json renders: its
// scalars as one table (nested objects as dotted names), each array of
// objects as a table of its own. Known experiments (by the summary's
// "experiment" field) also get plots drawn from the summary; a trace.csv
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

// ---- ordered JSON -------------------------------------------------------

// object keeps a JSON object's keys in the order the run wrote them, so the
// tables read like the summary.
type object []field

type field struct {
	Key string
	Val any
}

func (o object) get(k string) any {
	for _, f := range o {
		if f.Key == k {
			return f.Val
		}
	}
	return nil
}

func decodeOrdered(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch d := t.(type) {
	case json.Delim:
		switch d {
		case '{':
			var o object
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o = append(o, field{k.(string), v})
			}
			_, err := dec.Token()
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", d)
	case json.Number:
		f, err := d.Float64()
		return f, err
	default:
		return t, nil // string, bool, nil
	}
}

// ---- tables ---------------------------------------------------------------

type row struct{ Key, Val string }

type table struct {
	Name    string
	Columns []string
	Rows    [][]string
}

// tables splits the summary: scalars (flattened, dotted) and one table per
// array of objects (its rows flattened the same way).
func tables(o object) ([]row, []table) {
	var scalars []row
	var tabs []table
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case object:
			for _, f := range x {
				walk(join(prefix, f.Key), f.Val)
			}
		case []any:
			if len(x) > 0 && allObjects(x) {
				tabs = append(tabs, arrayTable(prefix, x))
				return
			}
			parts := make([]string, len(x))
			for i, e := range x {
				parts[i] = format(e)
			}
			scalars = append(scalars, row{prefix, strings.Join(parts, ", ")})
		default:
			scalars = append(scalars, row{prefix, format(v)})
		}
	}
	walk("", o)
	return scalars, tabs
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func allObjects(a []any) bool {
	for _, e := range a {
		if _, ok := e.(object); !ok {
			return false
		}
	}
	return true
}

func arrayTable(name string, a []any) table {
	t := table{Name: name}
	idx := map[string]int{}
	var rows []map[string]string
	for _, e := range a {
		r := map[string]string{}
		var flat func(prefix string, v any)
		flat = func(prefix string, v any) {
			if o, ok := v.(object); ok {
				for _, f := range o {
					flat(join(prefix, f.Key), f.Val)
				}
				return
			}
			if _, ok := idx[prefix]; !ok {
				idx[prefix] = len(t.Columns)
				t.Columns = append(t.Columns, prefix)
			}
			if arr, ok := v.([]any); ok {
				parts := make([]string, len(arr))
				for i, x := range arr {
					parts[i] = format(x)
				}
				r[prefix] = strings.Join(parts, ", ")
				return
			}
			r[prefix] = format(v)
		}
		flat("", e)
		rows = append(rows, r)
	}
	for _, r := range rows {
		line := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			line[i] = r[c]
		}
		t.Rows = append(t.Rows, line)
	}
	return t
}

func format(v any) string {
	switch x := v.(type) {
	case nil:
		return "–"
	case float64:
		return strconv.FormatFloat(x, 'g', 6, 64)
	case object:
		b, _ := json.Marshal(flatMap(x))
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

func flatMap(o object) map[string]any {
	m := map[string]any{}
	for _, f := range o {
		m[f.Key] = f.Val
	}
	return m
}

func num(v any) float64 {
	if f, ok := v.(float64); ok {
		return f
	}
	return math.NaN()
}

// ---- plots from the summary ----------------------------------------------

// summaryPlots draws what a known experiment's summary says at a glance;
// unknown experiments get none (their tables still render).
func summaryPlots(dir, experiment string, o object) ([]string, error) {
	var out []string
	save := func(name string, draw func(path string) error) error {
		if err := draw(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, name)
		return nil
	}
	rows := func(key string) []object {
		a, _ := o.get(key).([]any)
		var r []object
		for _, e := range a {
			if x, ok := e.(object); ok {
				r = append(r, x)
			}
		}
		return r
	}
	dig := func(x object, path ...string) float64 {
		var v any = x
		for _, p := range path {
			ob, ok := v.(object)
			if !ok {
				return math.NaN()
			}
			v = ob.get(p)
		}
		return num(v)
	}
	switch experiment {
	case "pid", "autonomic":
		reg := rows("regulated")
		if len(reg) == 0 {
			return nil, nil
		}
		var bars []Bar
		for _, r := range reg {
			thr := dig(r, "threshold_ms")
			bars = append(bars,
				Bar{Label: fmt.Sprintf("%g thr", thr), Value: thr},
				Bar{Label: fmt.Sprintf("%g mean", thr), Value: dig(r, "read_wait_ms", "mean")},
				Bar{Label: fmt.Sprintf("%g p95", thr), Value: dig(r, "read_wait_ms", "p95")})
		}
		if b, ok := o.get("baseline").(object); ok {
			bars = append(bars, Bar{Label: "free mean", Value: dig(b, "read_wait_ms", "mean")}, Bar{Label: "free p95", Value: dig(b, "read_wait_ms", "p95")})
		}
		err := save("report-wait-vs-threshold.png", func(p string) error {
			return BarPlot(p, experiment+": read wait per threshold (thr, mean, p95) and unthrottled", "read wait (ms)", bars)
		})
		return out, err
	case "interference":
		var x, p95, mean []float64
		for _, r := range rows("runs") {
			x = append(x, dig(r, "writers"))
			p95 = append(p95, dig(r, "read_wait_ms", "p95"))
			mean = append(mean, dig(r, "read_wait_ms", "mean"))
		}
		if len(x) == 0 {
			return nil, nil
		}
		err := save("report-wait-vs-writers.png", func(p string) error {
			return TimePlot(p, "interference: read wait vs concurrent writers", "writers", "read wait (ms)",
				[]Series{{Name: "p95", X: x, Y: p95}, {Name: "mean", X: x, Y: mean}}, nil)
		})
		return out, err
	case "delay-sweep", "delay-sweep-fresh":
		by := map[string]*Series{}
		var order []string
		type point struct {
			prefix string
			o      object
		}
		var pts []point
		for _, r := range rows("points") {
			pts = append(pts, point{"", r})
		}
		// Run with --backends: each backend's points, named by it.
		for _, run := range rows("runs") {
			be, _ := run.get("backend").(string)
			sum, _ := run.get("summary").(object)
			if sum == nil {
				continue
			}
			a, _ := sum.get("points").([]any)
			for _, e := range a {
				if x, ok := e.(object); ok {
					pts = append(pts, point{be + " ", x})
				}
			}
		}
		for _, pt := range pts {
			r := pt.o
			dd, _ := r.get("direction").(string)
			d := pt.prefix + dd
			s := by[d]
			if s == nil {
				s = &Series{Name: d}
				by[d] = s
				order = append(order, d)
			}
			s.X = append(s.X, dig(r, "delay_ms"))
			s.Y = append(s.Y, dig(r, "mb_s"))
		}
		var ss []Series
		for _, d := range order {
			ss = append(ss, *by[d])
		}
		if len(ss) == 0 {
			return nil, nil
		}
		err := save("report-rate-vs-delay.png", func(p string) error {
			return TimePlot(p, experiment+": throughput vs added delay", "delay (ms)", "MB/s", ss, nil)
		})
		return out, err
	case "equal-share":
		h, ok := o.get("per_host_mb_s").(object)
		if !ok {
			return nil, nil
		}
		var bars []Bar
		for _, f := range h {
			bars = append(bars, Bar{Label: f.Key, Value: num(f.Val)})
		}
		err := save("report-per-host.png", func(p string) error {
			return BarPlot(p, "equal-share: throughput per host", "MB/s", bars)
		})
		return out, err
	}
	return nil, nil
}

// thresholds finds the run's thresholds (threshold_ms anywhere in the
// summary) to draw as reference lines.
func thresholds(o object) []float64 {
	var out []float64
	seen := map[float64]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case object:
			for _, f := range x {
				if f.Key == "threshold_ms" {
					if t := num(f.Val); !math.IsNaN(t) && !seen[t] {
						seen[t] = true
						out = append(out, t)
					}
				}
				walk(f.Val)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(o)
	return out
}

// ---- plots from trace.csv ---------------------------------------------------

// maxTracePhases bounds the series per trace plot: beyond it (overhead has
// 80 phase×repeat runs) a plot is unreadable and the tables say more.
const maxTracePhases = 8

// tracePlots draws, per phase (first repeat), the read wait averaged over
// the devices that had reads (smoothed like the thesis' figures, EWMA
// α 0.15) and the write rate summed over devices, against time in phase.
func tracePlots(dir, path string, thr []float64) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd := csv.NewReader(f)
	rd.ReuseRecord = true
	head, err := rd.Read()
	if err != nil {
		return nil, err
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, need := range []string{"phase", "repeat", "t_s", "r_await_ms", "reads", "write_mb_s"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("no %q column (not a lab trace)", need)
		}
	}
	type tick struct {
		t                 float64
		waitSum, reads    float64
		write             float64
		hasWait, hasWrite bool
	}
	type phase struct {
		name  string
		ticks []*tick
		byT   map[string]*tick
	}
	var phases []*phase
	byName := map[string]*phase{}
	parse := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	for {
		rec, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if rec[col["repeat"]] != "0" {
			continue
		}
		name := rec[col["phase"]]
		p := byName[name]
		if p == nil {
			if len(phases) == maxTracePhases {
				continue
			}
			p = &phase{name: name, byT: map[string]*tick{}}
			byName[name] = p
			phases = append(phases, p)
		}
		ts := rec[col["t_s"]]
		k := p.byT[ts]
		if k == nil {
			k = &tick{t: parse(ts)}
			p.byT[ts] = k
			p.ticks = append(p.ticks, k)
		}
		// Weight each device's wait by its reads: the resource's wait is
		// total read ticks over total reads, as iostat would compute it.
		if w, n := parse(rec[col["r_await_ms"]]), parse(rec[col["reads"]]); !math.IsNaN(w) && n > 0 {
			k.waitSum += w * n
			k.reads += n
			k.hasWait = true
		}
		if w := parse(rec[col["write_mb_s"]]); !math.IsNaN(w) {
			k.write += w
			k.hasWrite = true
		}
	}
	if len(phases) == 0 {
		return nil, nil
	}
	var wait, write []Series
	for _, p := range phases {
		sort.Slice(p.ticks, func(i, k int) bool { return p.ticks[i].t < p.ticks[k].t })
		ws := Series{Name: p.name}
		wr := Series{Name: p.name}
		last := math.NaN()
		for _, k := range p.ticks {
			v := math.NaN()
			if k.hasWait {
				v = k.waitSum / k.reads
			}
			if !math.IsNaN(v) {
				if math.IsNaN(last) {
					last = v
				} else {
					last = 0.15*v + 0.85*last
				}
			}
			ws.X, ws.Y = append(ws.X, k.t), append(ws.Y, last)
			wv := math.NaN()
			if k.hasWrite {
				wv = k.write
			}
			wr.X, wr.Y = append(wr.X, k.t), append(wr.Y, wv)
		}
		wait, write = append(wait, ws), append(write, wr)
	}
	var refs []Line
	for _, t := range thr {
		refs = append(refs, Line{Name: fmt.Sprintf("threshold %g ms", t), Y: t})
	}
	var out []string
	if err := TimePlot(filepath.Join(dir, "report-trace-read-wait.png"), "Read wait per phase (EWMA α 0.15, devices with reads)",
		"time in phase (s)", "read wait (ms)", wait, refs); err != nil {
		return nil, err
	}
	out = append(out, "report-trace-read-wait.png")
	if err := TimePlot(filepath.Join(dir, "report-trace-write-rate.png"), "Write rate per phase (all devices)",
		"time in phase (s)", "MB/s", write, nil); err != nil {
		return nil, err
	}
	return append(out, "report-trace-write-rate.png"), nil
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
<tr><td>report generated</td><td>{{.Generated}} by <code>sanqos report</code></td></tr>
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
