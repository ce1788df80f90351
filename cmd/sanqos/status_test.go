package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/labcli"
	"github.com/sanqos/sanqos/throttle"
	"github.com/spf13/cobra"
)

// serveAPI runs the agent's control API on a temp socket with a fixed
// status (and a real dry-run backend, so `throttle set` shows up).
func serveAPI(t *testing.T, st agent.Status) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := agent.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	mem := throttle.NewMemory()
	api := &agent.API{T: mem, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Status: func() any {
		s := st
		s.Throttles = map[string]throttle.Setting{}
		for a, v := range mem.List() {
			s.Throttles[a.String()] = v
		}
		return s
	}, Events: func(since uint64) []agent.Event {
		out := []agent.Event{}
		for _, e := range testEvents {
			if e.Seq > since {
				out = append(out, e)
			}
		}
		return out
	}}
	srv := &http.Server{Handler: api.Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	if err := mem.Set(map[netip.Addr]throttle.Setting{netip.MustParseAddr("10.9.9.9"): {WriteDelay: 2 * time.Millisecond}, netip.MustParseAddr("10.99.0.5"): {WriteDelay: 21 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	return sock
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runTree(t, rootCmd, args...)
}

// trees are both binaries' command trees, sanqos' and sanqos-lab's: their
// pages and command lines follow the same rules, checked by the same
// tests.
var trees = []func() *cobra.Command{rootCmd, labcli.Root}

// runTree runs args on a fresh tree.
func runTree(t *testing.T, tree func() *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	c := tree()
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(args)
	err := c.Execute()
	return out.String(), err
}

var testStatus = agent.Status{
	Backend: "dry-run", Time: time.Unix(1000, 0), UnthrottledPorts: []uint16{3261, 4421},
	Resources: []agent.ResourceStatus{
		{Name: "vg1", IndicatorMs: 16.5, ThresholdMs: 15, FloorMs: 4.25, Step: 4, Delay: 2 * time.Millisecond, Throttleable: []string{"10.99.0.3"},
			Consumers: []agent.ConsumerStatus{{Addr: "10.99.0.2", ReadBps: 1.5e6, Queue: 0.6, LoadRead: 0.17},
				{Addr: "10.99.0.3", WriteBps: 12e6, Throttled: true, Queue: 3.94, LoadRead: 0.02, LoadWrite: 0.27},
				{Addr: "10.99.0.5", Throttled: true, Held: true, Setting: throttle.Setting{WriteDelay: 21 * time.Millisecond}}}},
		{Name: "vg2", IndicatorMs: math.NaN(), RawWaitMs: math.NaN(), ThresholdMs: 20},
		{Name: "vg3", IndicatorMs: 9, ThresholdMs: 8, Step: 43, Delay: 20 * time.Millisecond, RateLeverStep: 3},
		{Name: "vg4", IndicatorMs: 6.5, ThresholdMs: 5, Step: 40, Delay: 20 * time.Millisecond, FloorMs: 6.4, Unreachable: true},
		{Name: "vg5", IndicatorMs: 27, ThresholdMs: 15, Step: 40, Delay: 20 * time.Millisecond, AtMaxDelay: true},
		{Name: "vg6", IndicatorMs: math.NaN(), RawWaitMs: math.NaN(), ThresholdMs: 15, Unmapped: "no discovered pool matches (found sdb)"},
	},
}

func TestStatusTable(t *testing.T) {
	sock := serveAPI(t, testStatus)
	out, err := run(t, "status", "--socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	find := func(prefix string) []string {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix+" ") {
				return strings.Fields(l)
			}
		}
		t.Fatalf("no line for %s in\n%s", prefix, out)
		return nil
	}
	for _, tc := range []struct {
		row  string
		want []string
	}{
		// The floor: the read wait with no interferer ("-" until known).
		{"vg1", []string{"vg1", "16.5", "ms", "15.0", "ms", "4.2", "ms", "ABOVE", "2.0", "ms", "4", "10.99.0.3"}},
		{"vg2", []string{"vg2", "-", "20.0", "ms", "-", "ok", "-", "0", "-"}}, // no reads: no wait, not 0 ms
		{"vg3", []string{"vg3", "9.0", "ms", "8.0", "ms", "-", "capping", "20.0", "ms", "43", "-"}},
		{"vg4", []string{"vg4", "6.5", "ms", "5.0", "ms", "6.4", "ms", "UNREACHABLE", "20.0", "ms", "40", "-"}},
		// At max_delay and still above: the status says what to change.
		{"vg5", []string{"vg5", "27.0", "ms", "15.0", "ms", "-", "AT", "MAX", "20.0", "ms", "40", "-"}},
		// Mapped to nothing: said in the table and why below it.
		{"vg6", []string{"vg6", "-", "15.0", "ms", "-", "UNMAPPED", "-", "0", "-"}},
		{"UNMAPPED", []string{"UNMAPPED", "vg6:", "no", "discovered", "pool", "matches", "(found", "sdb)", "(it", "measures", "and", "slows", "nothing;", "discovery", "retries", "it", "every", "round)"}},
		// Ports the target exports on and the agent does not throttle
		// (a tgt portal on 3261, an nvmet port on 4421): one line each.
		{"UNTHROTTLED PORT 3261:", strings.Fields("UNTHROTTLED PORT 3261: the target exports on it, but it is not among the agent's ports: its hosts count as consumers, their traffic is neither delayed nor measured")},
		{"UNTHROTTLED PORT 4421:", strings.Fields("UNTHROTTLED PORT 4421: the target exports on it, but it is not among the agent's ports: its hosts count as consumers, their traffic is neither delayed nor measured")},
		{"AT", []string{"AT", "MAX:", "the", "wait", "is", "above", "the", "threshold", "at", "max_delay.", "Raise", "max_delay", "(up", "to", "99", "ms:", "about", "the", "interferers'"}},
		// Queue and load per direction: why a consumer is slowed, and which way.
		{"10.99.0.3", []string{"10.99.0.3", "vg1", "12.00", "0.00", "-", "-", "-", "3.9", "2%/27%", "throttleable"}},
		{"10.99.0.2", []string{"10.99.0.2", "vg1", "0.00", "1.50", "-", "-", "-", "0.6", "17%/0%", "-"}},
		{"10.9.9.9", []string{"10.9.9.9", "-", "0.00", "0.00", "2.0", "ms", "-", "-", "0.0", "-", "slowed"}}, // manual throttle
		// Idle, its last delay kept for its next burst (idle_hold).
		{"10.99.0.5", []string{"10.99.0.5", "vg1", "0.00", "0.00", "21.0", "ms", "-", "-", "0.0", "-", "held"}},
	} {
		if got := find(tc.row); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s row:\n got %q\nwant %q", tc.row, got, tc.want)
		}
	}
}

// An agent without --config serves only {"backend": ...} as its status;
// status still shows its manual throttles.
func TestStatusManualOnlyAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := agent.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	mem := throttle.NewMemory()
	mem.Set(map[netip.Addr]throttle.Setting{netip.MustParseAddr("10.99.0.4"): {ReadDelay: 3 * time.Millisecond}})
	srv := &http.Server{Handler: (&agent.API{T: mem, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	out, err := run(t, "status", "--socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"backend dry-run", "no resources (agent without --config", "10.99.0.4", "3.0 ms", "slowed"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusJSON(t *testing.T) {
	sock := serveAPI(t, testStatus)
	out, err := run(t, "status", "--json", "--socket", sock)
	if err != nil {
		t.Fatal(err)
	}
	var st agent.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(st.Resources) != 6 || st.Resources[5].Unmapped == "" || !st.Resources[4].AtMaxDelay || !st.Resources[3].Unreachable || st.Resources[2].RateLeverStep != 3 || st.Resources[0].IndicatorMs != 16.5 || !math.IsNaN(st.Resources[1].IndicatorMs) || st.Throttles["10.9.9.9"].WriteDelay != 2*time.Millisecond {
		t.Fatalf("round trip: %+v", st)
	}
	if !strings.Contains(out, `"indicator_ms": null`) {
		t.Errorf("unmeasured wait must be null for scripts:\n%s", out)
	}
}

func TestStatusWatchRefreshes(t *testing.T) {
	sock := serveAPI(t, testStatus)
	out, err := run(t, "status", "--socket", sock, "--watch=1ms", "--count", "3")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\033[H\033[2J"); n != 3 {
		t.Fatalf("%d screens, want 3", n)
	}
	if n := strings.Count(out, "THRESHOLD"); n != 3 {
		t.Fatalf("%d tables, want 3", n)
	}
}

func TestStatusAgentNotRunning(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sock, want string }{
		{filepath.Join(dir, "none.sock"), "agent not running: no socket at " + filepath.Join(dir, "none.sock")},
		{stale, "agent not running: nothing listens on " + stale},
	} {
		_, err := run(t, "status", "--socket", tc.sock)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "start it with: systemctl start sanqos (or: sanqos agent --config") {
			t.Errorf("%s: %v", tc.sock, err)
		}
	}
}

func TestStatusClasses(t *testing.T) {
	st := agent.Status{Resources: []agent.ResourceStatus{{Name: "vg1", Policy: "slo-classes", Classes: []agent.ClassStatus{
		{Name: "power", IOPS: 25, MBs: 1.6, LatencyMs: 14.5, Missing: true, DelayMs: 0, CreditS: 3,
			ThroughputDeviationPct: -3, IOPSDeviationPct: agent.JSONFloat(math.NaN()), LatencyDeviationMs: 1.25, JitterMs: 2},
	}}}}
	var b bytes.Buffer
	renderClasses(&b, st)
	for _, want := range []string{"CLASS", "power", "MISSING", "-3.0 %", "+1.25 ms", "2.0 ms", "3.0 s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("classes table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestStatusReservations(t *testing.T) {
	st := agent.Status{Resources: []agent.ResourceStatus{{Name: "vg1", Policy: "reservations",
		Network: &agent.NetStatus{QueueMs: 38.7, RawQueueMs: 40.1, Congested: true, AtRisk: 1, Level: 12},
		Reservations: []agent.ReservationStatus{{Consumer: "10.99.0.2", Unit: "bytes", Reserved: 1e6, PeriodS: 1, Attained: 4e5,
			LaxityPct: -1.5, AtRisk: true, Periods: 11, PeriodsMet: 8}},
	}}}
	var b bytes.Buffer
	renderReservations(&b, st)
	for _, want := range []string{"NET QUEUE", "38.7 ms", "40.1 ms", "CONGESTED", "1e+06 bytes", "10.99.0.2", "-150 % AT RISK", "8/11"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("reservations table lacks %q:\n%s", want, b.String())
		}
	}
}

// threshold: auto shows in the table beside the threshold in force, and
// in the JSON as threshold_auto with what was learned.
func TestStatusShowsAutoThreshold(t *testing.T) {
	for _, tc := range []struct {
		state, want string
	}{{"learning", "15.0 ms auto (learning)"}, {"learned", "11.3 ms auto"}} {
		thr := 15.0
		if tc.state == "learned" {
			thr = 11.3
		}
		st := agent.Status{Resources: []agent.ResourceStatus{{Name: "vg1", ThresholdMs: thr, IndicatorMs: 9, RawWaitMs: 9,
			Auto: &agent.AutoThresholdStatus{State: tc.state, PeakMBs: 30.4, WaitAtPeakMs: 11.3, BusySamples: 200, LoadedSamples: 400}}}}
		var table, js bytes.Buffer
		renderStatus(&table, st)
		if !strings.Contains(table.String(), tc.want) {
			t.Errorf("%s: table lacks %q:\n%s", tc.state, tc.want, table.String())
		}
		if err := printStatusDoc(&js, st, true); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(js.String(), `"threshold_auto": {`) || !strings.Contains(js.String(), `"state": "`+tc.state+`"`) {
			t.Errorf("%s: JSON lacks threshold_auto:\n%s", tc.state, js.String())
		}
	}
}

// The AT MAX advice names remedies that work: the bound it gives for
// max_delay is the config's, and each backend it names for
// rate_lever_steps caps writes and is accepted with the lever, which the
// config refuses on edt alone (the LIO guest's remedy: backend edt+htb,
// rate_lever_steps 40). It is printed once, and only while a resource is
// AT MAX: a resource capping past max_delay is not.
func TestStatusAtMaxAdviceNamesWorkingRemedies(t *testing.T) {
	var b strings.Builder
	renderStatus(&b, testStatus)
	out := b.String()
	if n := strings.Count(out, "AT MAX:"); n != 1 {
		t.Fatalf("AT MAX advice printed %d times:\n%s", n, out)
	}
	_, advice, _ := strings.Cut(out, "AT MAX:")
	advice, _, _ = strings.Cut(advice, "\n\n")
	const res = "resources:\n  - name: vg1\n    devices: [sdb]\n"
	parse := func(yaml string) error { _, err := config.Parse([]byte(yaml + res)); return err }
	bound := regexp.MustCompile(`up to (\d+) ms`).FindStringSubmatch(advice)
	if bound == nil {
		t.Fatalf("no max_delay bound in the advice %q", advice)
	}
	n, _ := strconv.Atoi(bound[1])
	if err := parse(fmt.Sprintf("max_delay: %dms\n", n)); err != nil {
		t.Errorf("the advice's max_delay %d ms: %v", n, err)
	}
	if parse(fmt.Sprintf("max_delay: %dms\n", n+1)) == nil {
		t.Errorf("max_delay %d ms accepted: the advice's bound %d ms is not the config's", n+1, n)
	}
	m := regexp.MustCompile(`rate_lever_steps with backend (\S+) \(or (\S+)\)`).FindStringSubmatch(advice)
	if m == nil {
		t.Fatalf("the advice %q names no backend for rate_lever_steps", advice)
	}
	for _, name := range m[1:] {
		if e, ok := throttle.Lookup(name); !ok || !e.Caps.Delay || !e.Caps.WriteRate {
			t.Errorf("the advice's backend %s: registered %v, caps %+v; want delays and write caps", name, ok, e.Caps)
		}
		if err := parse("backend: " + name + "\nrate_lever_steps: 40\n"); err != nil {
			t.Errorf("the advice's remedy on %s: %v", name, err)
		}
	}
	if parse("backend: edt\nrate_lever_steps: 40\n") == nil {
		t.Error("rate_lever_steps accepted on edt: the advice need not name edt+htb")
	}
	st := testStatus
	st.Resources = slices.DeleteFunc(slices.Clone(st.Resources), func(r agent.ResourceStatus) bool { return r.AtMaxDelay })
	b.Reset()
	renderStatus(&b, st)
	if strings.Contains(b.String(), "AT MAX") {
		t.Errorf("AT MAX advice without a resource at max_delay (one capping past it):\n%s", b.String())
	}
}
