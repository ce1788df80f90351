package guest

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// readmeMinimalConfig is the config the README calls minimal, as the
// README writes it.
func readmeMinimalConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "A minimal config:\n\n```yaml\n")
	cfg, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !strings.Contains(cfg, "resources:") {
		t.Fatalf("README.md has no minimal config block after \"A minimal config:\"")
	}
	return cfg
}

// protectedWithMinimalConfig is issue 52's LIO host, in the guest lab
// that TestLIOKernelInitiatorInGuest brought up: an agent started as the
// unit starts it, with only the README's minimal config (discovery
// auto, backend auto, the default socket), finds LIO by itself, takes
// edt and maps vg1's four consumers. It joins bm's network namespace
// with nsenter, which keeps the host's /sys (ip netns exec mounts a
// fresh sysfs that hides configfs), so it sees /sys/kernel/config as an
// agent on a real LIO host does. While b2 reads 8 KiB at random and
// b3..b5 write 64 KiB sequentially, it slows the writers. Either the
// reader's mean wait (the target's diskstats for its LUN's loop device)
// in the second half of the writers' 20 s is within 1.25 × the 15 ms
// threshold, as the tgt lab's agent tests ask
// (runHeldLoad), or the agent says it is not holding it (at-max events,
// which its log and sanqos_throttle_events_total carry too, or status
// AT MAX / UNREACHABLE): never silently unprotected. On the guest's
// 4 MB/s group one 64 KiB write holds the disk 33 ms, more than twice the
// threshold, and each write's R2T and status cross the delay (LIO's
// InitialR2T=Yes wins the negotiation), so at max_delay six such writers
// still keep the group busy: 2026-11-29, the writers pinned at 90 ms
// (three at-max events) and the reader at 41.1 ms. The remedy the AT MAX
// advice names, write caps past max_delay beside edt (backend edt+htb,
// rate_lever_steps), is the second run, which must hold (11.4 and
// 11.7 ms in two runs) and never slow the reader.
func protectedWithMinimalConfig(t *testing.T, gexec func(time.Duration, string) string, gbin string, luns []lab.LUN) {
	cfg := readmeMinimalConfig(t)
	r := minimalRun(t, gexec, gbin, luns, cfg, "edt")
	// Pinned at max_delay, the reader's own reads wait 40-50 ms. The
	// queue rule, when it was Little's law over completed requests, took
	// it for a saturating consumer in one run of four (1.3 queued); it
	// counts requests in flight now, which a reader with one at a time
	// never passes (agent/measure.go measureConsumer).
	if slices.Contains(r.slowed, "10.99.0.2") {
		t.Errorf("minimal config: slowed %v: never the reader", r.slowed)
	}
	if !r.held() && !r.saysSo() {
		t.Errorf("minimal config: reader's mean wait %.1f ms is above 1.25 × the 15 ms threshold and the agent does not say so (status at_max_delay/unreachable, at-max event)", r.meanMs)
	}
	r = minimalRun(t, gexec, gbin, luns, cfg+"backend: edt+htb\nrate_lever_steps: 40\n", "edt+htb")
	if slices.Contains(r.slowed, "10.99.0.2") {
		t.Errorf("minimal config with write caps: slowed %v: never the reader", r.slowed)
	}
	if !r.held() {
		t.Errorf("minimal config with write caps (edt+htb, rate_lever_steps 40): reader's mean wait %.1f ms is above 1.25 × the 15 ms threshold", r.meanMs)
	}
}

// minimalResult is what one run of the agent against the load showed.
type minimalResult struct {
	meanMs, reads  float64
	atMax, unreach bool    // the resource's status after the load
	floorMs        float64 // the floor it learnt
	atMaxEvents    int
	slowed         []string // whom slow events named
}

func (r minimalResult) held() bool { return r.reads > 0 && r.meanMs <= 1.25*15 }

// saysSo: the agent said it could not hold the threshold, in its event
// history and log (at-max: pinned at max_delay) or its status.
func (r minimalResult) saysSo() bool { return r.atMaxEvents > 0 || r.atMax || r.unreach }

// minimalRun starts the agent on cfg, checks that it found LIO and took
// backend, runs the load and reports it; it fails the test if the reader
// completed nothing or no writer was slowed.
func minimalRun(t *testing.T, gexec func(time.Duration, string) string, gbin string, luns []lab.LUN, cfg, backend string) minimalResult {
	t.Helper()
	gexec(time.Minute, fmt.Sprintf(`printf '%%s' %s > /run/minimal.yaml
setsid nsenter --net=/run/netns/bm %s agent --config /run/minimal.yaml --log-json > /run/minimal-agent.log 2>&1 < /dev/null &
echo $! > /run/minimal-agent.pid
`, Quote(cfg), gbin))
	defer gexec(time.Minute, `P=$(cat /run/minimal-agent.pid); kill $P 2>/dev/null; while kill -0 $P 2>/dev/null; do sleep 0.2; done`+"\n")
	status := gexec(3*time.Minute, fmt.Sprintf(`for i in $(seq 600); do
	s=$(ip netns exec bm %[1]s status --json 2>/dev/null) && printf '%%s' "$s" | grep -q '"lio"' && [ "$(printf '%%s' "$s" | grep -c '"addr": "10.99.0.[2-5]"')" = 4 ] && { printf '%%s' "$s"; exit 0; }
	sleep 0.2
done
echo "LIO and four consumers not found; agent log:"; cat /run/minimal-agent.log; exit 1
`, gbin))
	var st struct {
		Backend string   `json:"backend"`
		Sources []string `json:"discovery_sources"`
	}
	if err := json.Unmarshal([]byte(status), &st); err != nil || !slices.Contains(st.Sources, "lio") || st.Backend != backend {
		t.Fatalf("minimal config: status %v (want discovery lio, backend %s): %s", err, backend, status)
	}
	t.Logf("minimal config, backend %s: discovery found %v", st.Backend, st.Sources)
	var loop, dev = map[string]string{}, map[string]string{}
	for _, l := range luns {
		loop[l.Host], dev[l.Host] = l.Loop, l.Device
	}
	fio := func(host, rw string, jobs int, delay, runtime int, extra string) string {
		return fmt.Sprintf("ip netns exec %[1]s fio --name=%[1]s --filename=/dev/%[2]s --ioengine=libaio --direct=1 --rw=%[3]s --iodepth=1 --numjobs=%[4]d --startdelay=%[5]d --runtime=%[6]d --time_based %[7]s --output=/dev/null 2>&1 &\n",
			host, dev[host], rw, jobs, delay, runtime, extra)
	}
	// b2 reads throughout, as the lab's reader does (8 KiB at 256 KiB/s);
	// the writers run from 3 s to 23 s; the reader's diskstats line at
	// 13 s and 23 s frames the second half.
	script := fio("b2", "randread", 1, 0, 26, "--bs=8k --rate=256k")
	for _, h := range []string{"b3", "b4", "b5"} {
		script += fio(h, "write", 2, 3, 20, "--bs=64k")
	}
	ds := fmt.Sprintf(`awk '$3 == "%s" {print $4, $7}' /proc/diskstats >> /run/minimal-ds`, loop["b2"])
	gexec(3*time.Minute, "rm -f /run/minimal-ds\n"+script+"sleep 13\n"+ds+"\nsleep 10\n"+ds+"\nwait\n")
	out := gexec(time.Minute, "cat /run/minimal-ds\n")
	f := strings.Fields(out)
	if len(f) != 4 {
		t.Fatalf("reader's diskstats (%s): %q", loop["b2"], out)
	}
	n := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
	var r minimalResult
	r.reads = n(2) - n(0)
	if r.reads > 0 {
		r.meanMs = (n(3) - n(1)) / r.reads
	}
	var after struct {
		Resources []struct {
			AtMax       bool    `json:"at_max_delay"`
			Unreachable bool    `json:"unreachable"`
			FloorMs     float64 `json:"floor_ms"`
		}
	}
	if err := json.Unmarshal([]byte(gexec(time.Minute, fmt.Sprintf("ip netns exec bm %s status --json\n", gbin))), &after); err != nil || len(after.Resources) != 1 {
		t.Fatalf("status after the load: %v %+v", err, after)
	}
	r.atMax, r.unreach, r.floorMs = after.Resources[0].AtMax, after.Resources[0].Unreachable, after.Resources[0].FloorMs
	var evs []struct{ Consumer, Kind, Reason string }
	if err := json.Unmarshal([]byte(gexec(time.Minute, fmt.Sprintf("ip netns exec bm %s status --events --json\n", gbin))), &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch e.Kind {
		case "slow":
			r.slowed = append(r.slowed, e.Consumer)
			t.Logf("minimal config: slowed %s: %s", e.Consumer, e.Reason)
		case "at-max":
			r.atMaxEvents++
		}
	}
	t.Logf("minimal config, backend %s: reader's mean wait in the 2nd half of the load %.1f ms over %.0f reads (threshold 15 ms); slowed %v; at max_delay %v, unreachable %v (floor %.1f ms), at-max events %d",
		backend, r.meanMs, r.reads, r.slowed, r.atMax, r.unreach, r.floorMs, r.atMaxEvents)
	if r.reads == 0 {
		t.Errorf("the reader completed no read in the 2nd half of the load")
	}
	if !slices.ContainsFunc(r.slowed, func(a string) bool { return a != "10.99.0.2" }) {
		t.Errorf("slowed %v: want the writers (10.99.0.3-5)", r.slowed)
	}
	return r
}
