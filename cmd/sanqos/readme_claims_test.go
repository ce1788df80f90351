package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/throttle"
)

// readRepo reads a file of the repository, from cmd/sanqos.
func readRepo(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every README claim a unit test can check without root (issue 52: "every
// claim a test could check is checked by one"). Each row names the
// README's words, which must still be there (a reworded claim is
// re-checked here, not silently left behind), and checks them against
// the code, the packaging or the files they name. Claims that need the
// lab, the guest or root are checked where the table in the claims note
// says (lab/guest, packaging, internal/pkgdeb, throttle).
func TestReadmeClaims(t *testing.T) {
	readme := strings.Join(strings.Fields(readRepo(t, "README.md")), " ")
	d := config.Defaults()
	valid := func(yaml string, want bool) error {
		if _, err := config.Parse([]byte(yaml)); (err == nil) != want {
			return fmt.Errorf("%q: valid=%v, want %v (%v)", yaml, err == nil, want, err)
		}
		return nil
	}
	contains := func(path string, subs ...string) error {
		s := readRepo(t, path)
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				return fmt.Errorf("%s has no %q", path, sub)
			}
		}
		return nil
	}
	for _, c := range []struct {
		says  string
		check func() error
	}{
		{"up to 30 s, `idle_hold`", func() error { return eq(d.IdleHold, 30*time.Second) }},
		{"the default `max_delay` is 90 ms", func() error { return eq(d.MaxDelay, 90*time.Millisecond) }},
		{"`max_delay` (default 90 ms, at most 99 ms)", func() error {
			return firstErr(valid("max_delay: 99ms\n", true), valid("max_delay: 100ms\n", false))
		}},
		{"With `backend: auto` (the default)", func() error { return eq(d.Backend, "auto") }},
		{"the kernel NVMe target are discovered automatically", func() error { return eq(d.Discovery.Source, "auto") }},
		{"`quick_ack: false` leaves your routes alone", func() error {
			return firstErr(eq(d.QuickAck, true), valid("quick_ack: false\n", true))
		}},
		{"With a delay backend and `write_delay_on: replies` (the default; not in bridge mode) it also sets the route metric `quickack`", func() error {
			// Only the first tries (and, on no such device, says it could not).
			for _, c := range []struct {
				o   backendOptions
				try bool
			}{
				{backendOptions{Name: "edt", QuickAck: true, Options: throttle.Options{Chain: "OUTPUT"}}, true},
				{backendOptions{Name: "edt", QuickAck: true, Options: throttle.Options{Chain: "OUTPUT", WriteOn: "acks"}}, false},
				{backendOptions{Name: "edt", QuickAck: true, Options: throttle.Options{Chain: "FORWARD"}}, false},
				{backendOptions{Name: "htb", QuickAck: true, Options: throttle.Options{Chain: "OUTPUT"}}, false},
				{backendOptions{Name: "edt", QuickAck: true, DryRun: true, Options: throttle.Options{Chain: "OUTPUT"}}, false},
				{backendOptions{Name: "edt", Options: throttle.Options{Chain: "OUTPUT"}}, false},
			} {
				var log strings.Builder
				c.o.Device = "sanqos-none0"
				if q := enableQuickAck(c.o, slog.New(slog.NewTextHandler(&log, nil))); q != nil || strings.Contains(log.String(), "quickack not set") != c.try {
					return fmt.Errorf("%+v: tried %v, want %v (%s)", c.o, !c.try, c.try, log.String())
				}
			}
			return eq(d.WriteDelayOn, "replies")
		}},
		{"netem leaves (one per 0.5 ms step)", func() error { return eq(d.DelayStep, 500*time.Microsecond) }},
		{"SIOC's rule: the wait at 90 % of the peak throughput, never under 1.15 × the floor", func() error {
			if !strings.HasPrefix(agent.AutoRule, "the read wait at 90 % of the peak throughput") || !strings.HasSuffix(agent.AutoRule, "not under 1.15 × the floor") {
				return fmt.Errorf("agent.AutoRule is %q", agent.AutoRule)
			}
			return valid("threshold: auto\nresources:\n  - name: vg1\n", true)
		}},
		{"the dashboard at `http://127.0.0.1:9311/`", func() error { return eq(d.HTTP, "127.0.0.1:9311") }},
		{"objects named after its label (`sanqos`)", func() error {
			return eq(cleanupCmd().Flags().Lookup("label").DefValue, "sanqos")
		}},
		{"ports (`ports`, by default 3260 for iSCSI and 4420 for NVMe/TCP)", func() error { return eq(fmt.Sprint(d.Ports), "[3260 4420]") }},
		{"| `htb`, `delayline+htb`, `edt+htb` |", func() error {
			for _, b := range []string{"auto", "edt", "netem", "delayline", "htb", "delayline+htb", "edt+htb", "dry-run"} {
				if !slices.Contains(throttle.Names(), b) {
					return fmt.Errorf("no backend %s in %v", b, throttle.Names())
				}
			}
			return nil
		}},
		{"edt's program, the write caps and netem's marks lapse within a second unless the running agent refreshes them", func() error {
			return eq(throttle.DefaultMarkTTL, time.Second) // their lease's TTL: the agent sets none
		}},
		{"one iptables rule per family sending the target's packets to them to `NFQUEUE --queue-bypass`", func() error {
			return contains("throttle/delayline.go", `"NFQUEUE", "--queue-num"`, `"--queue-bypass"`)
		}},
		{`"throttle backend chosen" names the backend and why`, func() error {
			return contains("throttle/auto.go", `log.Info("throttle backend chosen", "backend", t.Name(), "reason", c.Why)`)
		}},
		{"A minimal config:", func() error {
			_, rest, _ := strings.Cut(readRepo(t, "README.md"), "A minimal config:\n\n```yaml\n")
			cfg, _, _ := strings.Cut(rest, "```")
			c, err := config.Parse([]byte(cfg))
			if err != nil {
				return err
			}
			if len(c.Resources) != 1 || c.Resources[0].Name != "vg1" || c.Threshold != 15*time.Millisecond || !slices.Equal(c.Resources[0].Important, []string{"10.0.0.21"}) {
				return fmt.Errorf("minimal config parses to %+v", c.Resources)
			}
			return nil
		}},
		{"Prometheus metrics at `/metrics` with a Grafana dashboard in `grafana/` and alert rules in `prometheus/`", func() error {
			return firstErr(contains("grafana/sanqos-dashboard.json", "sanqos_"), contains("prometheus/sanqos-alerts.yml", "alert:"))
		}},
		{"go1.26.8.linux-amd64.tar.gz", func() error { return contains("go.mod", "\ngo 1.26.8\n") }},
		{"`make install` puts the binary in `/usr/local/bin` and the unit in `/etc/systemd/system` (`make uninstall` removes them)", func() error {
			return contains("Makefile", "PREFIX ?= /usr/local\n", "BINDIR ?= $(PREFIX)/bin\n", "UNITDIR ?= /etc/systemd/system\n",
				"rm -f $(DESTDIR)$(BINDIR)/sanqos $(DESTDIR)$(UNITDIR)/sanqos.service")
		}},
		{"the lab tools, never installed", func() error {
			_, install, _ := strings.Cut(readRepo(t, "Makefile"), "\ninstall:")
			install, _, _ = strings.Cut(install, "\n\n")
			if strings.Contains(install, "sanqos-lab") {
				return fmt.Errorf("make install installs sanqos-lab:%s", install)
			}
			return nil
		}},
		{"`.ci/run` runs `scripts/test.sh` with `CI=true`", func() error {
			return contains(".ci/run", "export CI=true\n", "exec bash scripts/test.sh\n")
		}},
		{"keeps `CAP_NET_ADMIN`, `CAP_NET_RAW`, `CAP_BPF` and, for `auto`'s probes, `CAP_SYS_ADMIN`", func() error {
			return contains("packaging/sanqos.service", "\nCapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW CAP_BPF CAP_SYS_ADMIN\n")
		}},
		{"make deb # bin/sanqos_VERSION_ARCH.deb", func() error { return contains("Makefile", "\ndeb:\n", "-out bin\n") }},
		{"IET is parsed but not yet supported by the agent", func() error {
			c, err := config.Parse([]byte("discovery:\n  source: iet\n"))
			if err != nil {
				return err
			}
			if _, err := newDiscoverer(c); err == nil || !strings.Contains(err.Error(), "not wired yet") {
				return fmt.Errorf("the agent's discoverer for iet: %v, want not wired yet", err)
			}
			return nil
		}},
		{"turn on the write-rate lever (off by default", func() error { return eq(d.RateLeverSteps, 0) }},
		{"A single-stream interferer under 1 MB/s or in reads under 32 KiB looks like the reader it hurts; name it `throttleable`", func() error {
			return firstErr(eq(d.ReadMBs, 1.0), eq(d.WriteMBs, 1.0), eq(agent.BulkReadSize, 32<<10))
		}},
		{"netem and the caps act on IPv4 consumers only", func() error {
			v6 := throttle.NamesWith(func(c throttle.Caps) bool { return c.IPv6 })
			if !slices.Contains(v6, "edt") || !slices.Contains(v6, "delayline") || slices.Contains(v6, "netem") || slices.Contains(v6, "htb") {
				return fmt.Errorf("backends that delay IPv6: %v", v6)
			}
			return nil
		}},
		{"installs the same; gofmt, vet, staticcheck; every test", func() error {
			return contains("scripts/test.sh", "bash scripts/setup.sh", "gofmt -l", "go vet ./...", "staticcheck ./...", "go test -p 1 -count=1 -timeout 25m ./...")
		}},
		{"installs tgt, libiscsi, fio; builds; brings the lab up", func() error {
			return firstErr(contains("scripts/demo.sh", "bash scripts/setup.sh", "go build", "lab up"), contains("scripts/setup.sh", "pkgs=(tgt libiscsi-dev", "apt-get source -qq fio"))
		}},
	} {
		if !strings.Contains(readme, c.says) {
			t.Errorf("README.md no longer says %q: recheck the claim and this row", c.says)
			continue
		}
		if err := c.check(); err != nil {
			t.Errorf("README.md says %q: %v", c.says, err)
		}
	}
}

// Every relative link of the README reaches a file, and its #anchor a
// heading of that file (GitHub's slugs).
func TestReadmeLinksResolve(t *testing.T) {
	links := regexp.MustCompile(`\]\(([^)]+)\)`).FindAllStringSubmatch(readRepo(t, "README.md"), -1)
	if len(links) < 10 {
		t.Fatalf("found only %d links", len(links))
	}
	for _, l := range links {
		path, anchor, _ := strings.Cut(l[1], "#")
		if strings.Contains(path, "://") {
			continue
		}
		md := readRepo(t, path)
		if anchor == "" {
			continue
		}
		var slugs []string
		for _, h := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(md, -1) {
			slugs = append(slugs, slug(h[1]))
		}
		if !slices.Contains(slugs, anchor) {
			t.Errorf("README.md links %s: %s has no heading #%s", l[1], path, anchor)
		}
	}
}

// slug is GitHub's anchor of a heading: lower case, punctuation dropped,
// spaces as hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && r != '—' && r != '×' && r != '–':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func eq[T comparable](got, want T) error {
	if got != want {
		return fmt.Errorf("the code has %v, not %v", got, want)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
