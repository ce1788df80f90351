package doctor

import (
	"encoding/json"
	"strings"
	"testing"
)

const tgtConfig = `discovery:
  source: tgt
  tgt_control_port: 31
resources:
  - name: vg1
    devices: [auto]
`

const staticConfig = `discovery:
  source: static
resources:
  - name: vg1
    devices: [loop0, loop1]
    throttleable: [10.99.0.3]
`

// nvmetGuest discovers the guest's nvmet fixture: vg1 exported on 4420
// and 4421.
const nvmetGuest = "discovery:\n  source: nvmet\n  root: ../discover/testdata/nvmet-guest/nvmet\nresources:\n  - name: vg1\n    devices: [auto]\n"

// warnedConfig has two warnings on the lab host: sdb is not in its
// diskstats, and 10.99.0.3 is both important and throttleable.
const warnedConfig = `discovery:
  source: static
resources:
  - name: vg1
    devices: [loop0, sdb]
    important: [10.99.0.3]
    throttleable: [10.99.0.3]
`

// guestLoops is the guest's /proc/diskstats (empty: its root is shared
// from the host) once the lab's loop devices are set up.
var guestLoops = map[string]string{"proc/diskstats": "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n   7       1 loop1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"}

// queueHeld is the lab's bm namespace while its delay line runs: queue 0
// bound, its rules and sets in place.
func queueHeld(t *testing.T) fixture {
	return fixture{base: "host-6.18",
		files: map[string]string{
			"proc/net/netfilter/nfnetlink_queue": read(t, "testdata/lab-bm/proc/net/netfilter/nfnetlink_queue"),
			"proc/net/ip_tables_names":           read(t, "testdata/lab-bm/proc/net/ip_tables_names"),
		},
		exec: map[string]string{
			"iptables-save": read(t, "testdata/lab-bm/iptables-save.txt"),
			"ipset list -n": read(t, "testdata/lab-bm/ipset-list-n.txt"),
		},
	}
}

// want is a check's expected status and words its summary must hold.
type want struct {
	status Status
	says   string
}

// checkCase is a host and what each check must say of it.
type checkCase struct {
	name string
	fx   func(t *testing.T) fixture
	want map[string]want // by check; checks not named must be ok
}

// checkCases are hosts captured from the lab machine (kernel 6.18: no
// netem, no fq) and from Debian's stock kernel (the guest's 6.1:
// everything as modules), with what goes wrong on real targets: a taken
// queue, iptables-nft, several NICs, a missing device, the systemd unit's
// capabilities, no kernel config, a running agent.
var checkCases = []checkCase{
	{"lab host, no config", func(*testing.T) fixture { return fixture{base: "host-6.18"} }, map[string]want{
		"kernel":     {OK, "has htb, clsact, cls_bpf, nfqueue, ipset, xt_set, nf_tables; lacks netem, fq"},
		"backend":    {OK, "auto → delayline: kernel runs none of edt, netem"},
		"netfilter":  {OK, "iptables v1.8.9 (legacy)"},
		"nfqueue":    {OK, "queue 0 is free"},
		"interfaces": {OK, "eth0: the only non-loopback interface that is up"},
		"target":     {OK, "found: tgt"},
		"discovery":  {OK, "tgt (tgtadm -C 31 --lld iscsi --op show --mode target): 2 targets, 13 sessions, 2 resources, 4 consumers"},
	}},
	{"lab host, tgt config", func(*testing.T) fixture { return fixture{base: "host-6.18", config: tgtConfig} }, map[string]want{
		"config":    {OK, "valid (mode target, backend auto, discovery tgt, 1 resources)"},
		"target":    {OK, "discovery tgt: found"},
		"listeners": {OK, "http 127.0.0.1:9311 free"},
		"discovery": {OK, "2 targets, 13 sessions, 2 resources, 4 consumers"},
	}},
	{"LIO configfs from the stock-kernel guest, on the lab's loop devices", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: "discovery:\n  source: lio\n  root: ../discover/testdata/lio-guest/target\nresources:\n  - name: vg1\n    devices: [auto]\n"}
	}, map[string]want{
		"target":    {OK, "discovery lio: found"},
		"discovery": {OK, "lio (../discover/testdata/lio-guest/target): 2 targets, 5 sessions, 2 resources, 4 consumers"},
	}},
	// nvmet's configfs from the guest exports vg1 on 4420 and 4421: an
	// agent on some of them leaves the hosts on the others undelayed;
	// ports naming both protects both.
	{"nvmet on two ports, the agent on one", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: "iscsi_port: 4420\n" + nvmetGuest}
	}, map[string]want{
		"target":    {OK, "discovery nvmet: found"},
		"discovery": {Fail, "the target exports on TCP port 4421, which the agent does not throttle (ports [4420]): its hosts count as consumers, but their traffic is neither delayed nor measured"},
	}},
	{"nvmet's second port beside the default ports", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: nvmetGuest}
	}, map[string]want{
		"target":    {OK, "discovery nvmet: found"},
		"discovery": {Fail, "the target exports on TCP port 4421, which the agent does not throttle (ports [3260 4420])"},
	}},
	{"nvmet on two ports, the agent on both", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: "ports: [4420, 4421]\n" + nvmetGuest}
	}, map[string]want{
		"target":    {OK, "discovery nvmet: found"},
		"discovery": {OK, "nvmet (../discover/testdata/nvmet-guest/nvmet): 2 targets, 0 sessions, 1 resources, 0 consumers"},
	}},
	// tgtd given a second portal (tgtadm --op new --mode portal) on 3261:
	// an agent on 3260 alone leaves that portal's hosts undelayed.
	{"tgt with a portal on 3261, the agent on 3260", func(t *testing.T) fixture {
		return fixture{base: "host-6.18", config: "ports: [3260]\n" + tgtConfig,
			exec: map[string]string{"tgtadm -C 31 --lld iscsi --op show --mode portal": read(t, "../discover/testdata/tgtadm-portal-3261.txt")}}
	}, map[string]want{
		"target":    {OK, "discovery tgt: found"},
		"discovery": {Fail, "the target exports on TCP port 3261, which the agent does not throttle (ports [3260]): its hosts count as consumers, but their traffic is neither delayed nor measured"},
	}},
	{"tgt on another control port", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: strings.Replace(tgtConfig, "tgt_control_port: 31", "tgt_control_port: 0", 1)}
	}, map[string]want{
		"target": {Warn, "no tgtd control socket /var/run/tgtd/socket.0 (tgtd not running, or another -C); tgtd runs with -C 31: set discovery.tgt_control_port: 31"},
		// Every round of the agent's discovery would fail: nothing mapped.
		"discovery": {Fail, "tgtadm: exit status 1: not on this fixture; the agent's discovery would fail every round, so no resource maps to anything"},
	}},
	{"auto finds the lab's tgtd", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: strings.Replace(tgtConfig, "source: tgt", "source: auto", 1)}
	}, map[string]want{
		"config":    {OK, "discovery auto"},
		"target":    {OK, "discovery auto: found tgt"},
		"discovery": {OK, "tgt (tgtadm -C 31 --lld iscsi --op show --mode target): 2 targets, 13 sessions, 2 resources, 4 consumers"},
	}},
	{"auto finds tgt and LIO, and maps across both", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: strings.Replace(tgtConfig, "source: tgt", "source: auto\n  root: ../discover/testdata/lio-guest", 1)}
	}, map[string]want{
		"target":    {OK, "discovery auto: found tgt, lio"},
		"discovery": {OK, "lio (../discover/testdata/lio-guest/target): 2 targets, 5 sessions"},
	}},
	{"auto on the default port, tgtd on another", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: "resources:\n  - name: vg1\n    devices: [auto]\n"}
	}, map[string]want{
		"target":    {Warn, "discovery auto: no target software found (tgt: no control socket /var/run/tgtd/socket.0 (tgtd runs with -C 31: set discovery.tgt_control_port: 31); lio: no "},
		"discovery": {Fail, "discovery auto: no target software found, so no resource maps to anything"},
	}},
	{"a typo'd resource beside a good one", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: tgtConfig + "  - name: vg9\n    devices: [auto]\n"}
	}, map[string]want{
		"discovery": {Fail, "resource vg9 maps to nothing: no discovered pool matches (found "},
	}},
	{"an important address no session comes from", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: tgtConfig + "    important: [10.99.0.2, 10.99.0.9]\n"}
	}, map[string]want{
		"discovery": {Fail, "important 10.99.0.9 of resource vg1 is none of its consumers (no session from it on the resource's targets: a typo, or the initiator is not logged in; its consumers: 10.99.0.2, "},
	}},
	{"delay line's queue taken", queueHeld, map[string]want{
		"nfqueue":   {Fail, "queue 0 is taken by netlink port 15876"},
		"backend":   {Fail, "auto → delayline: NFQUEUE 0 is taken by netlink port 15876"},
		"netfilter": {Warn, "5 sanqos rules or sets in this namespace"},
	}},
	{"queue taken, dry-run", func(t *testing.T) fixture {
		f := queueHeld(t)
		f.config = tgtConfig + "backend: dry-run\n"
		return f
	}, map[string]want{
		"nfqueue":    {OK, "but the dry-run backend does not queue"},
		"netfilter":  {Warn, "sanqos rules or sets"},
		"backend":    {OK, "dry-run"},
		"interfaces": {OK, "(not used by the dry-run backend)"},
	}},
	{"iptables-nft on a kernel without nft queue", func(*testing.T) fixture {
		return fixture{base: "host-6.18", exec: map[string]string{"iptables -V": "iptables v1.8.9 (nf_tables)\n"}}
	}, map[string]want{
		"netfilter": {Fail, "update-alternatives --set iptables /usr/sbin/iptables-legacy"},
		"backend":   {Fail, "no nft queue (CONFIG_NFT_QUEUE)"},
	}},
	{"no iptables", func(*testing.T) fixture {
		return fixture{base: "host-6.18", noExec: []string{"iptables", "iptables-save"}}
	}, map[string]want{
		"netfilter": {Fail, "no iptables program"},
		"backend":   {Fail, "no iptables program"},
	}},
	{"two NICs, auto takes the delay line: no device needed", func(*testing.T) fixture {
		return fixture{base: "host-6.18", links: append(thisHost(), up("eth1", "198.51.100.2/24"))}
	}, map[string]want{
		"interfaces": {Warn, "cannot tell the interface towards the consumers among [eth0 eth1]: give --device (or device: in the config)"},
	}},
	{"two NICs, htb needs one", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: tgtConfig + "backend: htb\n", links: append(thisHost(), up("eth1", "198.51.100.2/24"))}
	}, map[string]want{
		"interfaces": {Fail, "cannot tell the interface towards the consumers among [eth0 eth1]: give --device (or device: in the config)"},
		"backend":    {Fail, "htb: cannot tell the interface"},
	}},
	{"two NICs, device given", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: tgtConfig + "backend: htb\ndevice: eth1\n", links: append(thisHost(), up("eth1", "198.51.100.2/24"))}
	}, map[string]want{
		"interfaces": {OK, "eth1 (device: in the config)"},
		"backend":    {OK, "htb"},
	}},
	{"device that is not there", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: tgtConfig + "backend: htb\ndevice: eth9\n"}
	}, map[string]want{
		"interfaces": {Fail, `device "eth9" (device: in the config) is not an interface here`},
		"backend":    {Fail, `device "eth9"`},
	}},
	{"netem asked of a kernel without it", func(*testing.T) fixture { return fixture{base: "host-6.18", config: tgtConfig + "backend: netem\n"} }, map[string]want{
		"backend": {Fail, "the netem backend needs CONFIG_NET_SCH_NETEM, which this kernel lacks"},
	}},
	{"stock kernel as root: auto takes edt", func(*testing.T) fixture { return fixture{base: "stock-6.1"} }, map[string]want{
		"kernel":       {OK, "6.1.0-56-amd64 (/boot/config-6.1.0-56-amd64): has netem, fq, htb, clsact, cls_bpf, nfqueue, ipset, xt_set, nf_tables"},
		"backend":      {OK, "auto → edt: kernel has fq and tc BPF"},
		"nfqueue":      {OK, "module not loaded yet"},
		"capabilities": {OK, "holds what the agent needs"},
		"target":       {OK, "found: none"},
		"discovery":    {OK, "no target software found"},
	}},
	{"stock kernel, two NICs: auto's edt has no device", func(*testing.T) fixture {
		return fixture{base: "stock-6.1", links: append(thisHost(), up("eth1", "198.51.100.2/24"))}
	}, map[string]want{
		"interfaces": {Fail, "cannot tell the interface"},
		"backend":    {Fail, "auto → edt: auto: kernel has fq and tc BPF but the edt backend would fail: cannot tell the interface"},
		"target":     {OK, ""}, "discovery": {OK, ""},
	}},
	{"stock kernel under the systemd unit's capabilities: auto probes and takes edt", func(*testing.T) fixture { return fixture{base: "stock-6.1", status: "unit"} }, map[string]want{
		"capabilities": {OK, "holds what the agent needs"},
		"backend":      {OK, "auto → edt"},
		"nfqueue":      {OK, ""}, "target": {OK, ""}, "discovery": {OK, ""},
	}},
	{"stock kernel without CAP_SYS_ADMIN (the unit's drop-in for a named backend): auto cannot probe", func(*testing.T) fixture {
		return fixture{base: "stock-6.1", status: "named"}
	}, map[string]want{
		"capabilities": {Warn, "lacks CAP_SYS_ADMIN"},
		"backend":      {Warn, "auto → delayline: this kernel runs edt, but auto's probes cannot run here"},
		"nfqueue":      {OK, ""}, "target": {OK, ""}, "discovery": {OK, ""},
	}},
	{"stock kernel, edt asked with only the network capabilities", func(*testing.T) fixture {
		return fixture{base: "stock-6.1", status: "netonly", config: staticConfig + "backend: edt\n", files: guestLoops}
	}, map[string]want{
		"capabilities": {Fail, "lacks CAP_BPF or CAP_SYS_ADMIN"},
		"backend":      {OK, "edt"},
		"target":       {OK, "discovery static"},
		"discovery":    {OK, "static: 1 resources from the config"},
	}},
	{"stock kernel, edt named under the drop-in's capabilities", func(*testing.T) fixture {
		return fixture{base: "stock-6.1", status: "named", config: staticConfig + "backend: edt\n", files: guestLoops}
	}, map[string]want{
		"capabilities": {OK, "holds what the agent needs"},
		"backend":      {OK, "edt"},
		"target":       {OK, "discovery static"},
		"discovery":    {OK, "static: 1 resources from the config"},
	}},
	{"htb named without CAP_SYS_ADMIN: its mark lease needs no setns", func(*testing.T) fixture {
		return fixture{base: "host-6.18", status: "named", config: tgtConfig + "backend: htb\n"}
	}, map[string]want{
		"backend": {OK, "htb"},
	}},
	{"unprivileged user", func(*testing.T) fixture { return fixture{base: "host-6.18", status: "user"} }, map[string]want{
		"capabilities": {Fail, "uid 1000 lacks CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN"},
		"backend":      {OK, "auto → delayline"},
	}},
	{"no kernel config", func(*testing.T) fixture {
		return fixture{base: "host-6.18", files: map[string]string{"proc/config.gz": ""}}
	}, map[string]want{
		"kernel":  {Warn, "no kernel config"},
		"backend": {Warn, "cannot tell whether auto's edt probe succeeds"},
	}},
	{"invalid config", func(*testing.T) fixture { return fixture{base: "host-6.18", config: "interval: -1s\nbogus: 1\n"} }, map[string]want{
		"config": {Fail, "the agent would refuse this config"},
	}},
	// The config's warnings (issue 52 item 7): devices that the host's
	// /proc/diskstats lacks, an address both important and throttleable.
	// They fail the check under --strict only.
	{"static devices all in diskstats", func(*testing.T) fixture { return fixture{base: "host-6.18", config: staticConfig} }, map[string]want{
		"config": {OK, "valid (mode target, backend auto, discovery static, 1 resources)"}, "target": {OK, ""}, "discovery": {OK, ""},
	}},
	{"config warnings", func(*testing.T) fixture { return fixture{base: "host-6.18", config: warnedConfig} }, map[string]want{
		"config": {Warn, "valid (mode target, backend auto, discovery static, 1 resources); 2 warnings"}, "target": {OK, ""}, "discovery": {OK, ""},
	}},
	{"config warnings, --strict", func(*testing.T) fixture { return fixture{base: "host-6.18", config: warnedConfig, strict: true} }, map[string]want{
		"config": {Fail, "1 resources); 2 warnings, refused by --strict"}, "target": {OK, ""}, "discovery": {OK, ""},
	}},
	{"no diskstats to check devices against", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: staticConfig, files: map[string]string{"proc/diskstats": ""}}
	}, map[string]want{
		"config": {Warn, "1 resources); 1 warnings"}, "target": {OK, ""}, "discovery": {OK, ""},
	}},
	{"iet is not wired into the agent", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: "discovery:\n  source: iet\n  root: testdata/iet\n"}
	}, map[string]want{
		"target":    {Fail, `discovery source "iet" is not wired yet`},
		"discovery": {OK, "iet (testdata/iet): 3 targets, 2 sessions, 1 resources, 3 consumers"},
		// No resources: valid, but the agent would protect nothing.
		"config": {Warn, "0 resources"},
	}},
	{"another agent running, its http port taken", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: tgtConfig, dial: true, files: map[string]string{
			"run/sanqos/sanqos.sock": "socket",
			"proc/net/tcp": "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
				"   0: 0100007F:245F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n",
		}}
	}, map[string]want{
		"listeners": {Fail, "another agent is listening on /run/sanqos/sanqos.sock; http 127.0.0.1:9311: port taken by a listener on 127.0.0.1:9311"},
		"discovery": {OK, ""},
	}},
	{"bridge mode without its capture interface", func(*testing.T) fixture {
		return fixture{base: "host-6.18", config: "mode: bridge\ncapture_interface: br-tgt\nresources:\n  - name: a\n    portals: [10.0.0.1]\n"}
	}, map[string]want{
		"interfaces": {Fail, `capture_interface "br-tgt" is not an interface here`},
		"target":     {OK, "bridge mode: no target to ask"},
		"discovery":  {OK, "bridge mode: 1 resources by portal"},
	}},
}

// TestChecks runs every check on every case.
func TestChecks(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.fx(t).env(t)
			rep := Run(e, Checks(e))
			failed := false
			for _, r := range rep.Results {
				w, named := tc.want[r.Name]
				if !named {
					w = want{status: OK}
				}
				if r.Status != w.status || !strings.Contains(r.Summary, w.says) {
					failed = true
					t.Errorf("%s: %s %q\n\twant %s with %q", r.Name, r.Status, r.Summary, w.status, w.says)
				}
			}
			if wantOK := !hasFail(tc.want); rep.OK != wantOK {
				t.Errorf("report OK %v, want %v (failed: %v)", rep.OK, wantOK, rep.Failed())
			}
			if failed || testing.Verbose() {
				b, _ := json.MarshalIndent(rep, "", "  ")
				t.Logf("report:\n%s", b)
			}
		})
	}
}

func hasFail(w map[string]want) bool {
	for _, x := range w {
		if x.status == Fail {
			return true
		}
	}
	return false
}

// The config check's details are the warnings, each at its file and
// line with its value, the device check's after Load's.
func TestConfigWarningsDetail(t *testing.T) {
	e := fixture{base: "host-6.18", config: warnedConfig}.env(t)
	r := e.configCheck()
	want := []string{
		"warning: " + e.ConfigPath + ":7: resources[0].throttleable[0]: 10.99.0.3: also important (important[0] on line 6): an important consumer is never slowed, so this entry does nothing",
		"warning: " + e.ConfigPath + ":5: resources[0].devices[1]: sdb: not in /proc/diskstats: the agent would measure no read wait on it",
	}
	if got := strings.Join(r.Detail, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("detail\n got %s\nwant %s", got, strings.Join(want, "\n"))
	}
	if again := e.configCheck(); len(again.Detail) != len(want) {
		t.Errorf("a second run: %q", again.Detail)
	}
}
