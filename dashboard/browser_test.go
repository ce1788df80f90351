package dashboard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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
	artifacts := os.Getenv("SANQOS_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	artifacts = filepath.Join(artifacts, "dashboard")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", artifacts)

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

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.DisableGPU, chromedp.NoSandbox,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
		// Without these Chromium waits on a network this machine does not have.
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()

	shot := func(name string) chromedp.Action[chromedp.Void] {
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
	poll := func(js string) chromedp.Action[chromedp.Void] {
		// An interval, not the default requestAnimationFrame polling, which
		// headless Chromium may pause for a page it does not paint.
		return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))
	}

	// The page loads, connects and draws the resource's charts.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#res-vg1 canvas[data-chart=wait]`),
		poll(`document.querySelector("#conn").dataset.state === "live"`),
		poll(`Number(document.querySelector("#res-vg1").dataset.points) >= 2`),
	); err != nil {
		t.Fatalf("page did not load and draw: %v", err)
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
