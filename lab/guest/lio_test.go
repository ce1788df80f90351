package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/lab"
)

// Issue 23 item 2 in the stock-kernel guest: `lab up --target lio
// --initiator kernel` serves the lab's LUNs from LIO (configfs) to
// open-iscsi's kernel initiator; the agent's LIO discovery sees each
// client as a consumer at its own address; a read delay on one client
// slows its reads and not its neighbour's; an agent with only the
// README's minimal config finds LIO by itself and slows three writers,
// holding the reader or saying it cannot, and holds it with write caps
// beside edt (protectedWithMinimalConfig, issue 52); and the guest's
// `lab down`
// leaves no configfs object, session, iscsid, client interface or
// module it loaded. Then the same guest builds the lab over NVMe/TCP
// (nvmeInGuest), which boots no guest of its own. Its own SANQOS_GUEST_DIR, like TestLabUpRunDownInGuest.
// It is one function because it is one guest lab, brought up once (a
// boot of the stock kernel) and taken down at the end: each step is the
// next one's premise.
func TestLIOKernelInitiatorInGuest(t *testing.T) {
	requireGuest(t)
	testenv.RequireCommands(t, "go", "iscsid", "iscsiadm", "fio")
	tmp := t.TempDir()
	bin := buildLab(t, tmp)
	dir := filepath.Join(tmp, "guest")
	sanqos := func(timeout time.Duration, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "SANQOS_GUEST_DIR="+dir)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("sanqos %s: %v in %v", strings.Join(args, " "), err, time.Since(start).Round(time.Second))
		return string(out), err
	}
	defer func() {
		if l := Leftovers(dir); len(l) > 0 {
			Remove(dir, 10*time.Second)
		}
	}()
	out, err := sanqos(5*time.Minute, "lab", "up", "--kernel", "debian", "--target", "lio", "--initiator", "kernel")
	if err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	for _, want := range []string{"LIO: targets in configfs", "kernel initiator: 5 sessions", "(LIO, configfs)", "/dev/sd"} {
		if !strings.Contains(out, want) {
			t.Errorf("lab up's output lacks %q:\n%s", want, out)
		}
	}
	g, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The guest's copies of sanqos-lab and sanqos.
	script, err := LabScript(dir, "version")
	if err != nil {
		t.Fatal(err)
	}
	gexec := func(timeout time.Duration, s string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var b strings.Builder
		rc, err := g.Exec(ctx, s, &b)
		if err != nil || rc != 0 {
			t.Fatalf("in the guest: rc %d, %v:\n%s\n%s", rc, err, s, b.String())
		}
		return b.String()
	}
	gexec(time.Minute, script+" > /dev/null\n")
	cur, _ := os.ReadFile(filepath.Join(dir, "bin", "current"))
	gdir := "/run/sanqos-bin/" + strings.TrimSpace(string(cur))
	gbin := gdir + "/sanqos"

	var st struct{ Resources []lab.Resource }
	if err := json.Unmarshal([]byte(gexec(time.Minute, gdir+"/sanqos-lab lab status --json\n")), &st); err != nil || len(st.Resources) != 1 {
		t.Fatalf("lab status --json: %v %+v", err, st)
	}
	dev := map[string]string{}
	for _, l := range st.Resources[0].LUNs {
		dev[l.Host] = l.Device
	}

	// The agent in bm: LIO discovery (what the autonomic experiment
	// configures), the delay line for the manual throttle. The threshold
	// is out of reach, so the controller slows no one by itself.
	sock := "/run/sanqos-lab/liotest.sock"
	cfg := fmt.Sprintf("backend: delayline\nhttp: 127.0.0.1:9398\nthreshold: 10s\nthrottleable_write_mb_s: 1000\n"+
		"discovery:\n  source: lio\n  root: %s/target\nresources:\n  - name: vg1\n", lab.LIOConfigfs)
	gexec(time.Minute, fmt.Sprintf(`printf '%%s' %s > /run/liotest.yaml
setsid ip netns exec bm %s agent --backend delayline --socket %s --config /run/liotest.yaml > /run/liotest-agent.log 2>&1 < /dev/null &
echo $! > /run/liotest-agent.pid
`, Quote(cfg), gbin, sock))
	stopAgent := `P=$(cat /run/liotest-agent.pid); kill $P 2>/dev/null; while kill -0 $P 2>/dev/null; do sleep 0.2; done` + "\n"
	defer func() {
		if g.alive() {
			g.Exec(context.Background(), stopAgent, nil)
		}
	}()
	// Discovery runs every second: wait (polling its answer, bounded)
	// until all four clients are consumers of vg1.
	status := gexec(3*time.Minute, fmt.Sprintf(`for i in $(seq 600); do
	s=$(ip netns exec bm %[1]s status --socket %[2]s --json 2>/dev/null) && [ "$(printf '%%s' "$s" | grep -c '"addr": "10.99.0.[2-5]"')" = 4 ] && { printf '%%s' "$s"; exit 0; }
	sleep 0.2
done
echo "no four consumers; agent log:"; cat /run/liotest-agent.log; exit 1
`, gbin, sock))
	var ast struct {
		Resources []struct {
			Name      string
			Devices   []string
			Consumers []struct{ Addr string }
		}
	}
	if err := json.Unmarshal([]byte(status), &ast); err != nil || len(ast.Resources) != 1 {
		t.Fatalf("agent status: %v\n%s", err, status)
	}
	r := ast.Resources[0]
	var addrs []string
	for _, c := range r.Consumers {
		addrs = append(addrs, c.Addr)
	}
	t.Logf("LIO discovery: resource %s, devices %v, consumers %v", r.Name, r.Devices, addrs)
	if len(r.Devices) != 4 {
		t.Errorf("resource devices %v, want the four LUNs' loop devices", r.Devices)
	}

	// b3 and b4 read their LUNs at once, before and after b3 (10.99.0.3)
	// gets a 30 ms read delay.
	pair := func(label string) (b3, b4 float64) {
		t.Helper()
		fio := func(host string) string {
			return fmt.Sprintf("ip netns exec %s fio --name=%s --filename=/dev/%s --ioengine=libaio --direct=1 --rw=randread --bs=8k --iodepth=1 --runtime=4 --time_based --output-format=json --output=/run/liotest-%s.json",
				host, host, dev[host], host)
		}
		gexec(2*time.Minute, fio("b3")+" &\n"+fio("b4")+" &\nwait\n")
		mean := func(host string) float64 {
			var res struct {
				Jobs []struct {
					Read struct {
						IOs  int                    `json:"total_ios"`
						Clat struct{ Mean float64 } `json:"clat_ns"`
					}
				}
			}
			out := gexec(time.Minute, "cat /run/liotest-"+host+".json\n")
			if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Jobs) != 1 || res.Jobs[0].Read.IOs == 0 {
				t.Fatalf("fio %s: %v\n%s", host, err, out)
			}
			return res.Jobs[0].Read.Clat.Mean / 1e6
		}
		b3, b4 = mean("b3"), mean("b4")
		t.Logf("%s: b3 %.1f ms, b4 %.1f ms per 8 KiB read", label, b3, b4)
		return b3, b4
	}
	b3a, b4a := pair("no throttle")
	gexec(time.Minute, fmt.Sprintf("ip netns exec bm %s throttle set 10.99.0.3 --read-delay 30ms --socket %s\n", gbin, sock))
	b3b, b4b := pair("b3 read-delayed 30 ms")
	if b3b < b3a+20 {
		t.Errorf("b3's reads: %.1f → %.1f ms under a 30 ms read delay", b3a, b3b)
	}
	if b4b > b4a+10 {
		t.Errorf("b4 (not throttled) slowed: %.1f → %.1f ms", b4a, b4b)
	}

	gexec(2*time.Minute, stopAgent)
	protectedWithMinimalConfig(t, gexec, gbin, st.Resources[0].LUNs)

	// The guest's own lab down: nothing of LIO, the initiator or its
	// modules is left (the guest stays up for the check).
	down := gexec(3*time.Minute, gdir+"/sanqos-lab lab down 2>&1\n")
	left := gexec(time.Minute, `ls /sys/kernel/config/target 2>/dev/null | sed 's/^/configfs target: /'
ls /sys/class/iscsi_session 2>/dev/null | sed 's/^/session: /'
pgrep -a iscsid | sed 's/^/process: /'
ls /sys/class/net | grep '^sq-' | sed 's/^/link: /'
grep -E '^(target_core_mod|iscsi_target_mod|target_core_iblock|target_core_file|iscsi_tcp|libiscsi|scsi_transport_iscsi) ' /proc/modules | sed 's/^/module: /'
ls /etc/iscsi/nodes /etc/iscsi/ifaces 2>/dev/null | grep -v ':$' | grep . | sed 's/^/record: /'
true
`)
	if strings.TrimSpace(left) != "" {
		t.Errorf("left after the guest's lab down (%s):\n%s", strings.TrimSpace(down), left)
	}
	// The same guest, over NVMe/TCP (issue 54).
	nvmeInGuest(t, gexec, gdir, dir)
	out, err = sanqos(2*time.Minute, "lab", "down", "--kernel", "debian")
	if err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	if l := Leftovers(dir); len(l) > 0 {
		t.Errorf("left after lab down: %v", l)
	}
}
