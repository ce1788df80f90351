package dashboard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/internal/testenv"
)

// TestBrowser runs the real thing: the sanqos binary as an agent (static
// discovery on a device of this machine, dry-run backend, temp socket,
// HTTP on a free port), the dashboard in headless Chromium, and a throttle
// set through the CLI that must appear in the page's table. Screenshots go
// to $SANQOS_ARTIFACTS (CI keeps them) or a temp dir.
// It is one function because it drives one agent and one browser session
// through the page's states in order; what it repeats (screenshots,
// polls) are closures over that session.
func TestBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "sanqos")
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, "../cmd/sanqos").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	artifacts := artifactsDir(t)

	sock := filepath.Join(dir, "agent.sock")
	cfg := filepath.Join(dir, "sanqos.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`backend: dry-run
socket: %s
http: 127.0.0.1:0
discovery: {source: static}
resources:
  - name: vg1
    devices: [%s]
    # The device is this machine's own disk, under whatever load it has:
    # a threshold it never reaches keeps the controller out of the table.
    threshold: 10s
    throttleable: [10.99.0.3]
`, sock, someDevice(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	agentCmd := exec.CommandContext(ctx, bin, "agent", "--config", cfg)
	agentCmd.Cancel = func() error { return agentCmd.Process.Signal(os.Interrupt) }
	stderr, err := agentCmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); agentCmd.Wait() }()
	base := "http://" + listenAddr(t, stderr)

	bctx := newBrowser(t, ctx, chromium)
	shot := screenshot(t, artifacts)

	// The page loads, connects and draws the resource's charts.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#res-vg1 canvas[data-chart=wait]`),
		poll(`document.querySelector("#conn").dataset.state === "live"`),
		poll(`Number(document.querySelector("#res-vg1").dataset.points) >= 2`),
	); err != nil {
		t.Fatalf("page did not load and draw: %v", err)
	}
	// The agent serves its events to the page; it has slowed nobody.
	if err := chromedp.Do(bctx, poll(`!document.querySelector("#no-events").hidden && document.querySelector("#throttle-events").hidden`)); err != nil {
		t.Fatalf("events section: %v", err)
	}
	// Charts update: more frames arrive, and the canvas is not blank.
	n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`Number(document.querySelector("#frames").textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx,
		poll(fmt.Sprintf(`Number(document.querySelector("#frames").textContent) >= %d`, n+2)),
		shot("1-charts.png"),
	); err != nil {
		t.Fatalf("charts did not update: %v", err)
	}
	drawn, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => {
		const c = document.querySelector("#res-vg1 canvas[data-chart=wait]");
		const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		for (let i = 3; i < d.length; i += 4) if (d[i]) return true;
		return false; })()`))
	if err != nil || !drawn {
		t.Fatalf("wait chart is blank (%v)", err)
	}

	// A throttle set through the CLI appears in the table with its delay.
	if out, err := exec.Command(bin, "throttle", "set", "10.9.9.9", "--write-delay", "2ms", "--socket", sock).CombinedOutput(); err != nil {
		t.Fatalf("throttle set: %v\n%s", err, out)
	}
	if err := chromedp.Do(bctx,
		poll(`(document.querySelector('tr[data-consumer="10.9.9.9"] td[data-col=write_delay_ms]') || {}).textContent === "2.0"`),
		// Sorting by write delay (largest first) puts it on top. A DOM
		// click, not a mouse event at coordinates: the new row has just
		// changed the column widths, and a mouse click could land on the
		// neighbouring header.
		chromedp.Evaluate[chromedp.Void](`document.querySelector("th[data-sort=write_delay_ms]").click()`),
		poll(`document.querySelector("th[data-sort=write_delay_ms]").getAttribute("aria-sort") === "descending"`),
		poll(`document.querySelector("#consumers tbody tr:first-child").dataset.consumer === "10.9.9.9"`),
		shot("2-throttled.png"),
	); err != nil {
		html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("#consumers").outerHTML`))
		t.Fatalf("CLI throttle not shown: %v\ntable: %s", err, html)
	}
	for sel, want := range map[string]string{
		`#consumers tbody tr:first-child td[data-col=addr]`: "10.9.9.9",
		`tr[data-consumer="10.9.9.9"] td[data-col=state]`:   "slowed",
		`#backend`: "dry-run",
	} {
		if got, err := chromedp.Run(bctx, chromedp.Text(sel)); err != nil || got != want {
			t.Errorf("%s: %q (%v), want %q", sel, got, err, want)
		}
	}
}

// someDevice names a block device in /proc/diskstats, so the agent's
// sampler has a real line to read.
func someDevice(t *testing.T) string {
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("no /proc/diskstats: %v", err))
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 3 && !strings.ContainsAny(f[2], "/") {
			return f[2]
		}
	}
	testenv.Missing(t, "no block device in /proc/diskstats")
	return ""
}

// listenAddr reads the agent's log until it says where HTTP listens (the
// config asks for port 0), then keeps draining it into the test log.
func listenAddr(t *testing.T, r io.Reader) string {
	sc := bufio.NewScanner(r)
	re := regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	for sc.Scan() {
		t.Log("agent: " + sc.Text())
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return m[1]
		}
	}
	t.Fatalf("agent exited before listening: %v", sc.Err())
	return ""
}

// artifactsDir is where screenshots go: $SANQOS_ARTIFACTS/dashboard (CI
// keeps them) or a temp dir.
func artifactsDir(t *testing.T) string {
	artifacts := os.Getenv("SANQOS_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	artifacts = filepath.Join(artifacts, "dashboard")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", artifacts)
	return artifacts
}

// newBrowser starts headless Chromium for ctx; it ends with ctx.
func newBrowser(t *testing.T, ctx context.Context, chromium string) context.Context {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.DisableGPU, chromedp.NoSandbox,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
		// Without these Chromium waits on a network this machine does not have.
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(bcancel)
	return bctx
}

// screenshot returns an action that saves a full-page PNG as name.
func screenshot(t *testing.T, artifacts string) func(name string) chromedp.Action[chromedp.Void] {
	return func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg) // quality 100 means PNG; below, JPEG
			if err != nil {
				return err
			}
			p := filepath.Join(artifacts, name)
			t.Logf("screenshot %s", p)
			return os.WriteFile(p, png, 0o644)
		})
	}
}

// poll waits until js is true in the page, checking at an interval, not
// the default requestAnimationFrame polling, which headless Chromium may
// pause for a page it does not paint.
func poll(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))
}

// The events list: the page shows the agent's events newest first, each
// with its delays, the wait against the threshold, the share and the
// reason, and fetches new ones when a frame says they moved. The page is
// served by the dashboard in this process over a scripted history, so
// the events are known (the agent of TestBrowser, on this machine's own
// disk, slows nobody).
func TestBrowserEvents(t *testing.T) {
	chromium := testenv.Chromium(t)
	var mu sync.Mutex
	evs := []agent.Event{{Seq: 1, Time: time.Unix(1000, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventSlow, IndicatorMs: 23.1,
		ThresholdMs: 15, Share: 0.41, Direction: "read", ReadDelayMs: 1, Reason: "saturates the resource: 3.9 requests queued ≥ throttleable_queue 2"}}
	d := New(func() agent.Status { return agent.Status{Backend: "dry-run", Time: time.Now()} }, Options{Period: 100 * time.Millisecond,
		Events: func(since uint64) []agent.Event {
			mu.Lock()
			defer mu.Unlock()
			var out []agent.Event
			for _, e := range evs {
				if e.Seq > since {
					out = append(out, e)
				}
			}
			return out
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go d.Run(ctx)
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close) // after the browser has gone (cancel), with its event stream
	bctx := newBrowser(t, ctx, chromium)
	shot := screenshot(t, artifactsDir(t))
	row := func(seq int, col string) string {
		return fmt.Sprintf(`(document.querySelector('#throttle-events tr[data-seq="%d"] td[data-col=%s]') || {}).textContent`, seq, col)
	}
	if err := chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/"),
		poll(row(1, "reason")+` === "saturates the resource: 3.9 requests queued ≥ throttleable_queue 2"`),
		poll(`document.querySelector("#no-events").hidden`),
	); err != nil {
		t.Fatalf("event not listed: %v", err)
	}
	for col, want := range map[string]string{"consumer": "10.99.0.3", "kind": "slow", "delays": "read 1.0 ms", "wait": "23.1 ms > 15 ms", "share": "41%"} {
		if got, err := chromedp.Run(bctx, chromedp.Evaluate[string](row(1, col))); err != nil || got != want {
			t.Errorf("%s: %q (%v), want %q", col, got, err, want)
		}
	}
	// A new event arrives with a later frame, and is listed first.
	mu.Lock()
	evs = append(evs, agent.Event{Seq: 2, Time: time.Unix(1030, 0), Resource: "vg1", Consumer: "10.99.0.3", Kind: agent.EventRelease,
		IndicatorMs: 9, ThresholdMs: 15, Reason: "released: resource below threshold"})
	mu.Unlock()
	if err := chromedp.Do(bctx,
		poll(`document.querySelector("#throttle-events tbody tr:first-child").dataset.seq === "2"`),
		poll(row(2, "wait")+` === "9.0 ms ≤ 15 ms"`),
		shot("3-events.png"),
	); err != nil {
		html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("#throttle-events").outerHTML`))
		t.Fatalf("new event not shown first: %v\n%s", err, html)
	}
}
