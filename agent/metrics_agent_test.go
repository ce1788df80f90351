package agent

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/version"
	"github.com/sanqos/sanqos/throttle"
)

// pendingSeries are series the alert rules query that other parts of
// issue 52 add to the agent: until they land, the tests accept their
// absence and log it (delete an entry once its series is exported).
var pendingSeries = map[string]string{
	"sanqos_config_last_reload_successful":                "issue 52 item 3 (reload)",
	"sanqos_config_last_reload_success_timestamp_seconds": "issue 52 item 3 (reload)",
}

// seriesUsed is every sanqos series the alert rules' expressions and the
// dashboard's queries read.
func seriesUsed(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	series := regexp.MustCompile(`sanqos_[a-z_]+`)
	var rules ruleFile
	readYAML(t, alertRules, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, m := range series.FindAllString(r.Expr, -1) {
				used[m] = append(used[m], "alert "+r.Alert)
			}
		}
	}
	b, err := os.ReadFile("../grafana/sanqos-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			for _, m := range series.FindAllString(q.Expr, -1) {
				used[m] = append(used[m], "panel "+p.Title)
			}
		}
	}
	return used
}

// scrapeAgent runs the agent (its registry, collector and handler, on
// the delay line's counters) through ticks in which the writer's load
// pushes the reader's wait over the threshold, and returns what its
// /metrics serves, as Prometheus parses it.
func scrapeAgent(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	cfg, err := config.Parse([]byte("backend: dry-run\nresources:\n  - name: vg1\n    devices: [loop0, loop1, loop2]\n    important: [10.99.0.4]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ss := &seqSampler{}
	for i, w := range []float64{10, 10, 25, 25, 25} {
		ss.snaps = append(ss.snaps, counters(i+1, w))
	}
	a := New(cfg, Deps{Throttle: countingThrottle{throttle.NewMemory()}, Sampler: ss, Log: slog.New(slog.DiscardHandler),
		NewController: func(*config.Config, config.Resource) Controller { return &propCtl{thr: 15} },
		NewSmoother:   func(float64) Smoother { return &lastValue{} }})
	a.SetTopology(&Topology{Resources: map[string]ResourceView{"vg1": {Devices: []string{"loop0", "loop1", "loop2"},
		Consumers: map[netip.Addr][]string{reader: {"loop0"}, writer: {"loop1"}, boss: {"loop2"}}}},
		Unthrottled: []uint16{4421}}) // nvmet on a second port: SanqosPortUnthrottled's series
	for i := range ss.snaps {
		if err := a.Step(time.Unix(0, int64(i+1)*1e8)); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(a.Metrics())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// has says whether the scrape holds series (a histogram's _bucket,
// _sum and _count are its family's).
func has(mfs map[string]*dto.MetricFamily, series string) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if name, ok := strings.CutSuffix(series, suffix); ok && mfs[name] != nil && len(mfs[name].Metric) > 0 {
			return true
		}
	}
	return false
}

// value is the one sample of family name whose labels include want.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no %s", name)
	}
next:
	for _, m := range mf.Metric {
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

// Every series an alert or a dashboard panel reads is on the running
// agent's /metrics once it regulates (not only in a collector's Describe,
// which says nothing of series that appear only in some states), and the
// counters and delays say what happened in the ticks.
func TestAgentScrapeHasWhatAlertsAndDashboardUse(t *testing.T) {
	mfs := scrapeAgent(t)
	used := seriesUsed(t)
	names := make([]string, 0, len(used))
	for m := range used {
		names = append(names, m)
	}
	sort.Strings(names)
	if len(names) < 20 {
		t.Fatalf("alerts and dashboard read only %v", names)
	}
	for _, m := range names {
		switch {
		case has(mfs, m):
		case pendingSeries[m] != "":
			t.Logf("%s (%v) not exported yet: %s adds it", m, used[m], pendingSeries[m])
		default:
			t.Errorf("%s, read by %v, is not on the agent's /metrics", m, used[m])
		}
	}
	// 4 intervals of counters(): the reader's 4 reads a tick, whose read
	// ticks counters() keeps as a mean since tick 0 (4·25·5 ms at tick
	// 5, 4·10·1 at the baseline), the writer's 30 writes of 3900 sectors.
	vg1 := map[string]string{"resource": "vg1"}
	w := map[string]string{"resource": "vg1", "consumer": writer.String()}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sanqos_resource_reads_total", vg1, 16},
		{"sanqos_resource_read_wait_seconds_total", vg1, (4*25*5 - 4*10*1) / 1e3},
		{"sanqos_consumer_written_bytes_total", w, 4 * 3900 * 512},
		{"sanqos_consumer_writes_total", w, 4 * 30},
		{"sanqos_resource_throttled_consumers", vg1, 1},
		{"sanqos_build_info", map[string]string{"version": version.Get().Version, "goversion": version.Get().GoVersion}, 1},
	} {
		if got := value(t, mfs, c.name, c.labels); !near6(got, c.want) {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The resource's delays are its one slowed consumer's, direction by
	// direction (the controller's delay goes to whichever it saturates).
	wd := value(t, mfs, "sanqos_consumer_delay_seconds", map[string]string{"consumer": writer.String(), "direction": "write"})
	rd := value(t, mfs, "sanqos_consumer_delay_seconds", map[string]string{"consumer": writer.String(), "direction": "read"})
	if wd == 0 {
		t.Fatal("the writer is not delayed: the scenario does not regulate")
	}
	if got := value(t, mfs, "sanqos_resource_delay_seconds", map[string]string{"resource": "vg1", "direction": "write"}); got != wd {
		t.Errorf("resource write delay %v, the writer's %v", got, wd)
	}
	if got := value(t, mfs, "sanqos_resource_delay_seconds", map[string]string{"resource": "vg1", "direction": "read"}); got != rd {
		t.Errorf("resource read delay %v, the writer's %v", got, rd)
	}
}

// docSection is the text of docs/operator-guide.md from the line
// holding from up to the next line holding to.
func docSection(t *testing.T, from, to string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/operator-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, from)
	j := strings.Index(s[max(i, 0):], to)
	if i < 0 || j < 0 {
		t.Fatalf("operator guide: no section from %q to %q", from, to)
	}
	return s[i : i+j]
}

// expandBraces turns `a_{b,c}_d` into a_b_d and a_c_d; a brace without
// a comma is a label selector and goes.
func expandBraces(s string) []string {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return []string{s}
	}
	j := strings.IndexByte(s[i:], '}') + i
	if !strings.Contains(s[i:j], ",") {
		return expandBraces(s[:i] + s[j+1:])
	}
	var out []string
	for _, alt := range strings.Split(s[i+1:j], ",") {
		out = append(out, expandBraces(s[:i]+alt+s[j+1:])...)
	}
	return out
}

// The operator guide's metrics table names every series the agent
// exports, and its table of renamed series names old series the agent
// no longer exports and new ones it does.
func TestOperatorGuideListsMetrics(t *testing.T) {
	known := exportedMetrics(t)
	listed := map[string]bool{}
	code := regexp.MustCompile("`(sanqos_[^`]+)`")
	for _, m := range code.FindAllStringSubmatch(docSection(t, "| metric | labels | meaning |", "**Renamed series**"), -1) {
		for _, n := range expandBraces(m[1]) {
			listed[n] = true
		}
	}
	for n := range known {
		if strings.HasPrefix(n, "sanqos_") && !listed[n] {
			t.Errorf("the operator guide's metrics table lacks %s", n)
		}
	}
	for n := range listed {
		if !known[n] && pendingSeries[n] == "" {
			t.Errorf("the operator guide lists %s, which the agent does not export", n)
		}
	}
	series := regexp.MustCompile(`sanqos_[a-z_]+`)
	rows := 0
	for _, line := range strings.Split(docSection(t, "| before | now |", "The dashboard is tested"), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "sanqos_") {
			continue
		}
		rows++
		for _, old := range series.FindAllString(cells[1], -1) {
			if known[old] {
				t.Errorf("renamed %s is still exported", old)
			}
		}
		for _, n := range series.FindAllString(cells[2], -1) {
			if !known[n] {
				t.Errorf("the rename table's %s is not exported", n)
			}
		}
	}
	if rows < 3 {
		t.Fatalf("read %d renamed series", rows)
	}
}

// The operator guide's alert table has a row for every rule, with the
// rule's severity, and none for a rule that does not exist.
func TestOperatorGuideListsAlerts(t *testing.T) {
	var rules ruleFile
	readYAML(t, alertRules, &rules)
	severity := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			severity[r.Alert] = r.Labels["severity"]
		}
	}
	row := regexp.MustCompile("(?m)^\\| `(Sanqos[A-Za-z]+)` \\|.*\\| (critical|warning) \\|$")
	listed := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(docSection(t, "| alert | fires when | severity |", "Each alert's description"), -1) {
		listed[m[1]] = true
		if s, ok := severity[m[1]]; !ok {
			t.Errorf("the operator guide lists alert %s, which the rules lack", m[1])
		} else if s != m[2] {
			t.Errorf("%s: the operator guide says %s, the rule %s", m[1], m[2], s)
		}
	}
	for a := range severity {
		if !listed[a] {
			t.Errorf("the operator guide's alert table lacks %s", a)
		}
	}
}
