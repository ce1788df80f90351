package guest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// nvmeInGuest is issue 54 in the guest that TestLIOKernelInitiatorInGuest
// booted (no boot of its own): `lab up --target nvmet --initiator kernel`
// builds the lab over NVMe/TCP on two resources, each client's queues
// in its own namespace; the agent's nvmet discovery maps hosts to
// subsystems from the Connects it captures — b2 and b5 on both
// resources, b3 and b4 on vg1 only — counts b5, with four I/O queues to
// vg2, as one consumer, and finds a host that reconnects within one
// discovery round; fio runs on /dev/nvmeXnY, timed by the wire too
// (wireAgainstFio; dir is the work directory the guest shares); and `lab
// down` leaves no nvmet object, controller or module of ours.
func nvmeInGuest(t *testing.T, gexec func(time.Duration, string) string, gdir, dir string) {
	gbin, glab := gdir+"/sanqos", gdir+"/sanqos-lab"
	up := gexec(5*time.Minute, glab+" lab up --resources vg1,vg2 --lun-size=134217728 --disk-bandwidth=4e6 --disk-seek=1ms --target nvmet --initiator kernel 2>&1\n")
	for _, want := range []string{"nvmet: 3 subsystems, port 10.99.0.1:4420 in netns bm", "NVMe/TCP host: 9 controllers", "/dev/nvme"} {
		if !strings.Contains(up, want) {
			t.Errorf("nvmet lab up's output lacks %q:\n%s", want, up)
		}
	}
	// Each client's queues are sockets of its own namespace, none of the
	// initial one's.
	socks := gexec(time.Minute, `for n in b2 b3 b4 b5; do printf '%s ' $n; ip netns exec $n ss -Htn state established '( dport = :4420 )' | awk '{print $3}' | sort -u | tr '\n' ' '; echo; done
echo "init $(ss -Htn state established '( dport = :4420 )' | wc -l)"
`)
	t.Logf("NVMe/TCP sockets by namespace:\n%s", socks)
	for _, h := range lab.Hosts {
		if !strings.Contains(socks, h+" "+lab.HostAddr(h).String()+":") {
			t.Errorf("no connection of %s from its namespace at its address:\n%s", h, socks)
		}
	}
	if !strings.Contains(socks, "init 0") {
		t.Errorf("connections in the initial namespace:\n%s", socks)
	}

	// The agent in bm, nvmet discovery on the lab's second configfs
	// mount; the threshold is out of reach.
	sock := "/run/sanqos-lab/nvmetest.sock"
	cfg := fmt.Sprintf("backend: delayline\nthreshold: 10s\nthrottleable_write_mb_s: 1000\niscsi_port: %d\n"+
		"discovery:\n  source: nvmet\n  root: %s/nvmet\nresources:\n  - name: vg1\n  - name: vg2\n", lab.NVMePort, lab.LIOConfigfs)
	gexec(time.Minute, fmt.Sprintf(`printf '%%s' %s > /run/nvmetest.yaml
setsid ip netns exec bm %s agent --socket %s --config /run/nvmetest.yaml > /run/nvmetest-agent.log 2>&1 < /dev/null &
echo $! > /run/nvmetest-agent.pid
for i in $(seq 300); do ip netns exec bm %[2]s status --socket %[3]s --json > /dev/null 2>&1 && exit 0; sleep 0.2; done
cat /run/nvmetest-agent.log; exit 1
`, Quote(cfg), gbin, sock))
	stopAgent := `P=$(cat /run/nvmetest-agent.pid); kill $P 2>/dev/null; while kill -0 $P 2>/dev/null; do sleep 0.2; done` + "\n"
	stopped := false
	defer func() {
		if !stopped {
			gexec(time.Minute, stopAgent)
		}
	}()

	// The lab's hosts connected before the agent ran: it saw no Connect,
	// and each is a consumer of every subsystem of the port. Connect
	// them again under its eyes, all to vg1, b2 and b5 to vg2 (b5 with
	// four I/O queues).
	connect := func(host, sub, extra string) string {
		opts := fmt.Sprintf("nqn=%s%s,transport=tcp,traddr=%s,trsvcid=%d,hostnqn=%s,hostid=5a9c0000-0000-4000-8000-0000000000%s,keep_alive_tmo=30%s",
			lab.NQNPrefix, sub, lab.TargetAddr, lab.NVMePort, lab.HostNQN(host), host, extra)
		return fmt.Sprintf("ip netns exec %s sh -c 'echo %s > /dev/nvme-fabrics'\n", host, opts)
	}
	disconnect := func(match string) string {
		return fmt.Sprintf(`for c in /sys/class/nvme/nvme*; do grep -q %s $c/subsysnqn 2>/dev/null && grep -q %s $c/hostnqn && echo 1 > $c/delete_controller; done; true`+"\n",
			Quote(lab.NQNPrefix), Quote(match))
	}
	script := disconnect(lab.NQNPrefix)
	for _, h := range lab.Hosts {
		script += connect(h, "vg1", "")
	}
	// Four I/O queues on two CPUs: the host caps each kind at one per
	// CPU, so two default and two write queues.
	script += connect("b2", "vg2", "") + connect("b5", "vg2", ",nr_io_queues=2,nr_write_queues=2")
	gexec(2*time.Minute, script)
	if n := strings.TrimSpace(gexec(time.Minute, "ip netns exec b5 ss -Htn state established '( dport = :4420 )' | wc -l\n")); n != "8" {
		t.Errorf("b5 has %s connections, want 8 (3 to vg1, 1 + 4 to vg2)", n)
	}
	want := map[string][]string{"vg1": {"10.99.0.2", "10.99.0.3", "10.99.0.4", "10.99.0.5"}, "vg2": {"10.99.0.2", "10.99.0.5"}}
	got, _ := pollConsumers(t, gexec, gbin, sock, want, 3*time.Minute)
	if !equalConsumers(got, want) {
		t.Fatalf("consumers %v, want %v (b3, b4 not on vg2; b5's five queues one consumer)", got, want)
	}

	// A host that disconnects and reconnects is found again within one
	// discovery round (discovery.interval, 1 s).
	gexec(time.Minute, disconnect(lab.HostNQN("b4")))
	gone := map[string][]string{"vg1": {"10.99.0.2", "10.99.0.3", "10.99.0.5"}, "vg2": want["vg2"]}
	pollConsumers(t, gexec, gbin, sock, gone, time.Minute)
	// Timed in the guest, from the connect's return to the start of the
	// status call that shows b4 (a status call alone takes 0.5–1 s in a
	// loaded TCG guest).
	took := gexec(time.Minute, connect("b4", "vg1", "")+fmt.Sprintf(`T1=$(date +%%s%%N)
for i in $(seq 100); do T=$(date +%%s%%N); ip netns exec bm %s status --socket %s --json | grep -q '"addr": "10.99.0.4"' && break; done
echo $(( (T - T1) / 1000000 )) $(( ($(date +%%s%%N) - T) / 1000000 ))
`, gbin, sock))
	var ms, call int
	if _, err := fmt.Sscan(took, &ms, &call); err != nil || ms > 1500 {
		t.Errorf("b4's reconnect found by a status call started %s ms after its connect returned, want within a discovery round (1 s)", strings.TrimSpace(took))
	}
	t.Logf("b4's reconnect found by a status call started %d ms after its connect returned (the call took %d ms)", ms, call)

	// fio, direct I/O, on b3's and b4's namespaces of vg1, timed by
	// the wire too.
	wireAgainstFio(t, gexec, gbin, dir)

	gexec(time.Minute, stopAgent)
	stopped = true
	down := gexec(3*time.Minute, glab+" lab down 2>&1\n")
	left := gexec(time.Minute, `ls /sys/kernel/config/nvmet/subsystems /sys/kernel/config/nvmet/ports 2>/dev/null | grep -v ':$' | grep . | sed 's/^/configfs nvmet: /'
grep -l nqn.2026-11.lab /sys/class/nvme/*/subsysnqn 2>/dev/null | sed 's/^/controller: /'
grep -E '^(nvmet|nvmet_tcp|nvme_tcp|nvme_fabrics|nvme_core|configfs) ' /proc/modules | sed 's/^/module: /'
true
`)
	if strings.TrimSpace(left) != "" {
		t.Errorf("left after the nvmet lab's down (%s):\n%s", strings.TrimSpace(down), left)
	}
}

// pollConsumers polls the agent's status until each resource's
// consumers are want's (bounded by limit) and returns the last seen and
// how long it took.
func pollConsumers(t *testing.T, gexec func(time.Duration, string) string, gbin, sock string, want map[string][]string, limit time.Duration) (map[string][]string, time.Duration) {
	t.Helper()
	start := time.Now()
	var got map[string][]string
	for time.Since(start) < limit {
		out := gexec(time.Minute, fmt.Sprintf("ip netns exec bm %s status --socket %s --json\n", gbin, sock))
		var st struct {
			Resources []struct {
				Name      string
				Consumers []struct{ Addr string }
			}
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		got = map[string][]string{}
		for _, r := range st.Resources {
			for _, c := range r.Consumers {
				got[r.Name] = append(got[r.Name], c.Addr)
			}
		}
		if equalConsumers(got, want) {
			return got, time.Since(start)
		}
	}
	t.Errorf("consumers %v after %v, want %v", got, limit, want)
	return got, time.Since(start)
}

func equalConsumers(a, b map[string][]string) bool {
	for k := range b {
		x, y := slices.Clone(a[k]), slices.Clone(b[k])
		slices.Sort(x)
		slices.Sort(y)
		if !slices.Equal(x, y) {
			return false
		}
	}
	return len(a) <= len(b)
}
