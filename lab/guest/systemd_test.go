package guest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/pkgdeb"
	"github.com/sanqos/sanqos/internal/testenv"
)

// systemdScript runs in the systemd guest as a oneshot service, with the
// work directory (the .deb, a source tree for make) as its current
// directory. Each check prints "ok: NAME" or "FAIL: NAME: why"; the test
// wants every name in systemdChecks.
const systemdScript = `set -u
fails=0
ok() { echo "ok: $1"; }
fail() { echo "FAIL: $1: $2"; fails=$((fails+1)); }
step() { echo; echo "=== $(cut -d' ' -f1 /proc/uptime)s $*"; }
# pred NAME CMD...: ok when CMD succeeds.
pred() { n=$1; shift; if "$@"; then ok "$n"; else fail "$n" "$*"; fi; }
unit_state() { systemctl show -p ActiveState --value sanqos.service; }
mainpid() { systemctl show -p MainPID --value sanqos.service; }
# kstate: what of an agent is in the kernel: qdiscs and filters on the
# consumer-facing device, sanqos' rules and sets, links it would add.
kstate() {
	tc qdisc show dev sqg0 | grep -v -e noqueue -e 'qdisc clsact' | sed 's/^/qdisc: /'
	tc filter show dev sqg0 ingress | sed 's/^/ingress: /'
	tc filter show dev sqg0 egress | sed 's/^/egress: /'
	iptables-save 2>/dev/null | grep -i sanqos | sed 's/^/iptables: /'
	ip6tables-save 2>/dev/null | grep -i sanqos | sed 's/^/ip6tables: /'
	ipset list -n 2>/dev/null | grep -i sanqos | sed 's/^/ipset: /'
	ip -o link show | awk -F': ' '{print $2}' | grep -v -e '^lo$' -e '^sqg0' | sed 's/^/link: /'
}
# fetch_ms [HOST]: the quickest of five HTTP fetches, in ms, by the
# consumer from a server on the target's iSCSI port (3260, the port a
# backend delays) at HOST (default the IPv4 one): the reply's data is
# what a read delay holds. The quickest, as TCG makes any one of them
# slow now and then.
fetch_ms() {
	best=
	for i in 1 2 3 4 5; do
		t=$(ip netns exec consumer curl -g -s -o /dev/null --max-time 10 -w '%{time_total}' "http://${1:-10.214.0.1}:3260/f") || return 1
		ms=$(awk -v t="$t" 'BEGIN { printf "%d", t * 1000 }')
		if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
	done
	echo "$best"
}
# delayed MS BASE: a fetch of MS ms took the 80 ms read delay: at least
# 80 ms, and 60 ms more than BASE, the fetch with no agent.
delayed() { [ -n "$1" ] && [ "$1" -ge 80 ] && [ "$1" -ge $(($2 + 60)) ]; }
# undelayed MS BASE: no 80 ms read delay held it.
undelayed() { [ -n "$1" ] && [ "$1" -lt $(($2 + 60)) ]; }
# clean NAME: no agent state in the kernel.
clean() {
	s=$(kstate)
	if [ -z "$s" ]; then ok "$1"; else fail "$1" "left: $s"; fi
}
# journal: this run's (invocation's) agent log.
journal() { journalctl -b _SYSTEMD_INVOCATION_ID=$(systemctl show -p InvocationID --value sanqos.service) -o cat; }
# logged MSG [TEXT]: this run's agent logged MSG (with TEXT in the record).
logged() { journal | grep "\"msg\":\"$1\"" | grep -q -e "${2:-}"; }
# running NAME BACKEND: the unit is active, its agent runs BACKEND under
# the unit's capabilities, no_new_privs and seccomp filter, and answers
# on its socket.
running() {
	for i in $(seq 100); do $S status >/dev/null 2>&1 && break; sleep 0.3; done
	pred "$1/active" [ "$(unit_state)" = active ]
	pred "$1/status" $S status
	pid=$(mainpid)
	st=$(grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/$pid/status | tr -s '\t ' ' ')
	echo "$st"
	pred "$1/sandbox" [ "$st" = "$(printf 'CapEff: %s\nCapBnd: %s\nNoNewPrivs: 1\nSeccomp: 2' $CAPS $CAPS)" ]
	pred "$1/backend" logged "agent running" "\"backend\":\"$2\""
}
cfg() {
	cat > /etc/sanqos/sanqos.yaml <<EOF
backend: $1
device: sqg0
discovery:
  source: static
resources:
  - name: r1
    devices: [ram0]
EOF
}
# edt_refused_reload: systemctl reload exits non-zero when the agent
# refuses the file (ExecReload is sanqos reload, which waits for the
# verdict), and the agent runs on with the old config.
edt_refused_reload() {
	step "edt: a reload the agent refuses"
	cp /etc/sanqos/sanqos.yaml good.yaml
	printf 'backend: edt\ndevice: sqg0\ndiscovery:\n  source: static\nresources: []\n' > /etc/sanqos/sanqos.yaml
	systemctl reload sanqos
	pred edt/refused-reload-fails [ $? != 0 ]
	for i in $(seq 50); do logged "config reload rejected; the old config stays active" "lists no resources" && break; sleep 0.2; done
	pred edt/refused-logged logged "config reload rejected; the old config stays active" "lists no resources"
	pred edt/refused-same-pid [ "$(mainpid)" = "$pid" ]
	pred edt/refused-active [ "$(unit_state)" = active ]
	cp good.yaml /etc/sanqos/sanqos.yaml
	pred edt/reload-after-refusal systemctl reload sanqos
}
# edt_ipv6_beside_ipv4: the controller, not a manual throttle, slows an
# IPv6 consumer and an IPv4 one of a resource above its threshold: a
# null_blk device whose every I/O takes 30 ms (threshold 15 ms), both
# consumers listed throttleable. Both fetches take the delay, and the
# backend refused nothing.
edt_ipv6_beside_ipv4() {
	step "edt: an IPv6 consumer beside an IPv4 one, slowed by the agent"
	pred edt/v6/clear $S throttle clear --all
	modprobe null_blk nr_devices=1 irqmode=2 completion_nsec=30000000
	ip addr add fd00:214::1/64 dev sqg0 nodad
	ip -n consumer addr add fd00:214::2/64 dev sqg1 nodad
	pred edt/v6/httpd busybox httpd -p '[fd00:214::1]:3260' -h "$PWD/www"
	base6=$(fetch_ms '[fd00:214::1]')
	echo "IPv6 fetch with no delay: ${base6}ms"
	printf '  - name: slow\n    devices: [nullb0]\n    throttleable: [10.214.0.2, "fd00:214::2"]\n' >> /etc/sanqos/sanqos.yaml
	pred edt/v6/reload systemctl reload sanqos
	dd if=/dev/nullb0 of=/dev/null bs=4k iflag=direct count=1000000 2>/dev/null &
	ddpid=$!
	for i in $(seq 30); do
		ms=$(fetch_ms); ms6=$(fetch_ms '[fd00:214::1]')
		delayed "$ms" "$base" && delayed "$ms6" "$base6" && break
	done
	echo "edt, the agent slowing both: fetch IPv4 ${ms}ms, IPv6 ${ms6}ms (${base}ms, ${base6}ms with no delay)"
	$S throttle list
	$S status --events
	kill $ddpid
	pred edt/v6/ipv6-delayed delayed "$ms6" "$base6"
	pred edt/v6/ipv4-delayed delayed "$ms" "$base"
	$S status --events --json > events-v6.json
	pred edt/v6/slow-events sh -c 'grep -q "\"consumer\": *\"fd00:214::2\"" events-v6.json && grep -q "\"consumer\": *\"10.214.0.2\"" events-v6.json'
	pred edt/v6/no-apply-errors sh -c "curl -s http://127.0.0.1:9311/metrics | grep -qx 'sanqos_throttle_apply_errors_total 0'"
	cp good.yaml /etc/sanqos/sanqos.yaml
	pred edt/v6/restore systemctl reload sanqos
}
# CapEff of the unit's agent: CAP_NET_ADMIN (12), CAP_NET_RAW (13),
# CAP_SYS_ADMIN (21), CAP_BPF (39).
CAPS=0000008000203000

step "the guest: systemd $(systemctl --version | head -n 1), kernel $(uname -r)"
pred pid1 [ "$(cat /proc/1/comm)" = systemd ]
# A block device for the static resource, and the consumer-facing link:
# a veth pair whose other end, the consumer 10.214.0.2, is in a namespace.
modprobe brd rd_nr=1 rd_size=4096
ip link set lo up
ip netns add consumer
ip link add sqg0 type veth peer name sqg1
ip link set sqg1 netns consumer
ip addr add 10.214.0.1/24 dev sqg0
ip link set sqg0 up
ip -n consumer addr add 10.214.0.2/24 dev sqg1
ip -n consumer link set sqg1 up
clean baseline
# What the consumer reads: a file served on the target's iSCSI port.
mkdir -p www && echo sanqos > www/f
pred httpd busybox httpd -p 10.214.0.1:3260 -h "$PWD/www"
base=$(fetch_ms)
echo "fetch with no agent: ${base}ms"
pred fetch-baseline [ -n "$base" ]

step "dpkg -i"
# The package's binary (a /usr/local/bin/sanqos of the host's would come
# first on the PATH).
S=/usr/bin/sanqos
# man-db's trigger (mandb over every page) takes minutes under TCG.
rm -f /var/lib/man-db/auto-update
pred dpkg-install dpkg -i ./sanqos.deb
pred unit-loaded [ "$(systemctl show -p LoadState --value sanqos.service)" = loaded ]
pred not-enabled [ "$(systemctl is-enabled sanqos.service)" = disabled ]
pred not-started [ "$(unit_state)" = inactive ]

step "sanqos doctor"
cfg edt
$S doctor --config /etc/sanqos/sanqos.yaml > doctor.txt 2>&1
pred doctor [ $? = 0 ]
cat doctor.txt
$S doctor --config /etc/sanqos/sanqos.yaml --json > doctor.json
pred doctor-json [ $? = 0 ]
clean doctor-changes-nothing

for b in edt netem; do
	step "backend $b under systemd"
	cfg $b
	pred $b/start systemctl start sanqos
	running $b $b
	pred $b/throttle $S throttle set 10.214.0.2 --read-delay 80ms
	ms=$(fetch_ms)
	echo "$b: fetch with an 80 ms read delay: ${ms}ms (${base}ms with no agent)"
	pred $b/delays delayed "$ms" "$base"
	kstate > state-$b.txt
	cat state-$b.txt
	case $b in
	edt) pred $b/kernel-state sh -c 'grep -q "qdisc: qdisc fq" state-edt.txt && grep -q "egress: .*bpf" state-edt.txt' ;;
	netem) pred $b/kernel-state sh -c 'grep -q "qdisc: qdisc htb" state-netem.txt && grep -q "qdisc: qdisc netem" state-netem.txt' ;;
	esac
	pid=$(mainpid)
	pred $b/reload systemctl reload sanqos
	for i in $(seq 50); do logged "config reloaded" && break; sleep 0.2; done
	pred $b/reloaded logged "config reloaded"
	pred $b/same-pid [ "$(mainpid)" = "$pid" ]
	running $b/after-reload $b
	ms=$(fetch_ms)
	echo "$b: fetch after the reload: ${ms}ms"
	pred $b/delays-after-reload delayed "$ms" "$base"
	if [ $b = edt ]; then edt_refused_reload; edt_ipv6_beside_ipv4; fi
	pred $b/stop systemctl stop sanqos
	pred $b/stopped [ "$(unit_state)" = inactive ]
	pred $b/exit-0 [ "$(systemctl show -p ExecMainStatus --value sanqos.service)" = 0 ]
	clean $b/stop-clean
	ms=$(fetch_ms)
	echo "$b: fetch after the stop: ${ms}ms"
	pred $b/undelayed-after-stop undelayed "$ms" "$base"
	journal > journal-$b.txt
done

step "shadow agent (--dry-run)"
cfg edt
$S agent --config /etc/sanqos/sanqos.yaml --dry-run > shadow.log 2>&1 &
spid=$!
for i in $(seq 100); do $S status >/dev/null 2>&1 && break; sleep 0.3; done
pred shadow/status $S status
pred shadow/throttle $S throttle set 10.214.0.2 --read-delay 2ms
clean shadow/no-kernel-state
kill -INT $spid
wait $spid
pred shadow/exit-0 [ $? = 0 ]
clean shadow/after

step "dpkg -r, dpkg --purge"
pred enable systemctl enable --now sanqos
running remove edt
pred remove dpkg -r sanqos
pred remove/stopped sh -c '[ "$(systemctl show -p ActiveState --value sanqos.service)" != active ]'
pred remove/no-agent sh -c '! pgrep -x sanqos'
clean remove/clean
pred remove/files sh -c '[ ! -e /usr/bin/sanqos ] && [ ! -e /lib/systemd/system/sanqos.service ]'
pred remove/config-kept [ -e /etc/sanqos/sanqos.yaml ]
pred remove/enable-link-kept [ -L /etc/systemd/system/multi-user.target.wants/sanqos.service ]
pred purge dpkg --purge sanqos
pred purge/files sh -c '[ ! -e /etc/sanqos ] && [ ! -L /etc/systemd/system/multi-user.target.wants/sanqos.service ]'
pred purge/unit-gone [ "$(systemctl show -p LoadState --value sanqos.service)" = not-found ]

step "make install, make uninstall"
pred make-install make -C src --no-print-directory -o build install
S=/usr/local/bin/sanqos
cfg edt
pred make/enable systemctl enable --now sanqos
running make edt
pred make/throttle $S throttle set 10.214.0.2 --read-delay 2ms
pred make-uninstall make -C src --no-print-directory uninstall
pred make/stopped sh -c '[ "$(systemctl show -p ActiveState --value sanqos.service)" != active ]'
pred make/no-agent sh -c '! pgrep -x sanqos'
pred make/disabled sh -c '[ ! -e /etc/systemd/system/multi-user.target.wants/sanqos.service ]'
clean make/clean
pred make/files sh -c '[ ! -e /usr/local/bin/sanqos ] && [ ! -e /etc/systemd/system/sanqos.service ]'
pred make/unit-gone [ "$(systemctl show -p LoadState --value sanqos.service)" = not-found ]
pred make/config-kept [ -e /etc/sanqos/sanqos.yaml ]

step "end: failed units"
systemctl --failed --no-pager
echo "$fails failed"
exit $fails
`

// systemdChecks are the checks systemdScript must pass, each once at
// least: a check that never ran fails the test as one that failed.
var systemdChecks = []string{
	"pid1", "baseline", "httpd", "fetch-baseline", "dpkg-install", "unit-loaded", "not-enabled", "not-started",
	"doctor", "doctor-json", "doctor-changes-nothing",
	"edt/start", "edt/active", "edt/sandbox", "edt/backend", "edt/throttle", "edt/delays", "edt/kernel-state",
	"edt/reload", "edt/reloaded", "edt/same-pid", "edt/after-reload/active", "edt/delays-after-reload",
	"edt/refused-reload-fails", "edt/refused-logged", "edt/refused-same-pid", "edt/refused-active", "edt/reload-after-refusal",
	"edt/v6/clear", "edt/v6/httpd", "edt/v6/reload", "edt/v6/ipv6-delayed", "edt/v6/ipv4-delayed", "edt/v6/slow-events", "edt/v6/no-apply-errors", "edt/v6/restore",
	"edt/stop", "edt/stopped", "edt/exit-0", "edt/stop-clean", "edt/undelayed-after-stop",
	"netem/start", "netem/active", "netem/sandbox", "netem/backend", "netem/throttle", "netem/delays", "netem/kernel-state",
	"netem/reload", "netem/reloaded", "netem/same-pid", "netem/after-reload/active", "netem/delays-after-reload",
	"netem/stop", "netem/stopped", "netem/exit-0", "netem/stop-clean", "netem/undelayed-after-stop",
	"shadow/status", "shadow/throttle", "shadow/no-kernel-state", "shadow/exit-0", "shadow/after",
	"enable", "remove/active", "remove", "remove/stopped", "remove/no-agent", "remove/clean", "remove/files",
	"remove/config-kept", "remove/enable-link-kept", "purge", "purge/files", "purge/unit-gone",
	"make-install", "make/enable", "make/active", "make/sandbox", "make/throttle", "make-uninstall",
	"make/stopped", "make/no-agent", "make/disabled", "make/clean", "make/files", "make/unit-gone", "make/config-kept",
}

// Issue 32 items 4 and 5, for real: in one boot of the stock kernel with
// systemd as PID 1 (Options.Systemd), the Debian package built from this
// tree installs with dpkg; sanqos doctor (and --json) passes there; the
// unit, started by systemctl with its whole sandbox, runs the agent with
// edt and then netem on a veth towards a consumer, throttles it (fq and a
// tc BPF filter; HTB and netem leaves; the consumer's fetch from the
// target's port takes the 80 ms read delay set), survives `systemctl
// reload` (SIGHUP, same process, the delay still in force) and on
// `systemctl stop` exits 0 leaving nothing in the kernel and nothing
// delayed; a shadow agent (--dry-run) answers and creates nothing;
// dpkg -r stops the running agent and cleans up, purge removes the
// config and the enable link; and `make install` + `systemctl enable
// --now` then `make uninstall` stop, disable and clean up as well.
// It is one function because it is one boot of the guest under systemd,
// whose script runs these steps in order, each on what the one before
// left (a boot per step would take minutes each).
func TestSystemdUnitInGuest(t *testing.T) {
	requireGuest(t)
	testenv.RequireCommands(t, "go", "dpkg", "make")
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		testenv.Missing(t, "systemd is not installed (/lib/systemd/systemd): run scripts/setup.sh")
	}
	start := time.Now()
	dir := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// The package as `make deb` builds it: a static binary whose version
	// is the tree's.
	version := "v0.0.0"
	if out, err := exec.Command("git", "-C", repo, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(dir, "src", "bin", "sanqos")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/sanqos/sanqos/internal/version.Version="+version,
		"-o", bin, "github.com/sanqos/sanqos/cmd/sanqos")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sanqos: %v\n%s", err, out)
	}
	deb, err := pkgdeb.Build(pkgdeb.Options{Binary: bin, Source: repo, OutDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(deb, filepath.Join(dir, "sanqos.deb")); err != nil {
		t.Fatal(err)
	}
	// What `make install` and `make uninstall` read, the binary already
	// built (make -o build): the guest cannot see a checkout under /tmp,
	// and a Go build there would take minutes.
	for _, f := range []string{"Makefile", "packaging/sanqos.service", "examples/sanqos.yaml", "grafana/sanqos-dashboard.json", "prometheus/sanqos-alerts.yml"} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "src", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	built := time.Since(start)

	console, err := os.Create(filepath.Join(dir, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	res, err := Run(context.Background(), Options{Dir: dir, Systemd: true, Console: console, Timeout: 9 * time.Minute}, systemdScript)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("package built in %v; %s guest with systemd on %s: %v", built.Round(time.Second), res.Accel, res.Kernel, res.Elapsed.Round(time.Second))
	passed := map[string]bool{}
	var failed []string
	for _, l := range strings.Split(res.Output, "\n") {
		if n, found := strings.CutPrefix(l, "ok: "); found {
			passed[n] = true
		} else if strings.HasPrefix(l, "FAIL: ") {
			failed = append(failed, l)
		}
	}
	for _, c := range systemdChecks {
		if !passed[c] {
			failed = append(failed, "not run: "+c)
		}
	}
	var doc struct {
		OK     bool
		Checks []struct{ Name, Status, Summary string }
	}
	if b, err := os.ReadFile(filepath.Join(dir, "doctor.json")); err != nil || json.Unmarshal(b, &doc) != nil || !doc.OK {
		failed = append(failed, "doctor --json: not ok")
	}
	for _, c := range doc.Checks {
		t.Logf("doctor: %-12s %-4s %s", c.Name, c.Status, c.Summary)
	}
	if res.ExitCode != 0 || len(failed) > 0 {
		for _, f := range []string{"journal-edt.txt", "journal-netem.txt", "shadow.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			t.Logf("%s:\n%s", f, tail(string(b), 4000))
		}
		t.Fatalf("exit %d; %d checks failed:\n%s\nguest output:\n%s", res.ExitCode, len(failed), strings.Join(failed, "\n"), res.Output)
	}
	for _, l := range strings.Split(res.Output, "\n") {
		if strings.HasPrefix(l, "=== ") {
			t.Logf("guest at %s", l[4:])
		}
	}
	for _, f := range []string{"state-edt.txt", "state-netem.txt"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		t.Logf("%s:\n%s", f, b)
	}
	if _, end, found := strings.Cut(res.Output, "end: failed units\n"); found {
		t.Logf("guest's failed units (none of sanqos'):\n%s", end)
	}
	t.Logf("%d checks passed in %v", len(passed), time.Since(start).Round(time.Second))
}
