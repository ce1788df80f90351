package doctor

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var panicking = Check{"odd", func() Result { panic("unexpected /proc layout") }}

func fixed(name string, r Result) Check { return Check{name, func() Result { return r }} }

// A check that panics fails with the panic's message instead of taking
// the report with it; warnings do not fail the report, a failure does;
// scripts read statuses as words.
func TestRunVerdictAndJSON(t *testing.T) {
	e := &Env{ConfigPath: "/etc/sanqos/sanqos.yaml"}
	rep := Run(e, []Check{fixed("a", Result{Status: OK, Summary: "fine"}), fixed("b", Result{Status: Warn, Summary: "meh"})})
	if !rep.OK || len(rep.Failed()) != 0 {
		t.Fatalf("ok and warn: report %+v", rep)
	}
	rep = Run(e, []Check{fixed("a", Result{Status: OK}), panicking})
	if rep.OK || fmt.Sprint(rep.Failed()) != "[odd]" || !strings.Contains(rep.Results[1].Summary, "check crashed: unexpected /proc layout") {
		t.Fatalf("panicking check: %+v", rep)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"config":"/etc/sanqos/sanqos.yaml","ok":false,"checks":[{"name":"a","status":"ok","summary":""},{"name":"odd","status":"fail","summary":"check crashed: unexpected /proc layout"}]}`
	if string(b) != want {
		t.Errorf("json\n got %s\nwant %s", b, want)
	}
}

// /proc/net/tcp prints each 32-bit word of an address in host order: the
// lab host's own file (a listener on 0.0.0.0:2024), and IPv6 loopback.
func TestTCPListeners(t *testing.T) {
	got := tcpListeners([]byte(read(t, "testdata/host-6.18/proc/net/tcp")))
	if fmt.Sprint(got) != "[0.0.0.0:2024]" {
		t.Errorf("host tcp: %v", got)
	}
	v6 := "  sl  local_address                         remote_address                        st\n" +
		"   0: 00000000000000000000000001000000:245F 00000000000000000000000000000000:0000 0A 00000000:00000000\n" +
		"   1: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 01 00000000:00000000\n"
	if got := tcpListeners([]byte(v6)); len(got) != 1 || got[0] != netip.MustParseAddrPort("[::1]:9311") {
		t.Errorf("tcp6: %v, want only the listener [::1]:9311", got)
	}
}

// A malformed queue file is a warning with the line, not a crash or a
// silent "free".
func TestNfqueueMalformed(t *testing.T) {
	e := fixture{base: "host-6.18", files: map[string]string{"proc/net/netfilter/nfnetlink_queue": "zero 1 2\n"}}.env(t)
	r := e.nfqueueCheck()
	if r.Status != Warn || !strings.Contains(r.Summary, `line 1: "zero 1 2"`) {
		t.Errorf("got %s %q", r.Status, r.Summary)
	}
}

// A module that is loaded counts as present even without a kernel
// config, and one configured =m but not installed counts as absent.
func TestKernelModuleStates(t *testing.T) {
	e := fixture{base: "host-6.18", files: map[string]string{"proc/config.gz": "", "sys/module/sch_netem/initstate": "live\n"}}.env(t)
	if k := e.kernelFacts(); k.state["netem"] != loaded || k.state["fq"] != unknown {
		t.Errorf("no config: netem %v, fq %v; want module, loaded and unknown", k.state["netem"], k.state["fq"])
	}
	e = fixture{base: "stock-6.1", files: map[string]string{"lib/modules/6.1.0-56-amd64/modules.dep": "kernel/net/sched/sch_htb.ko:\n"}}.env(t)
	k := e.kernelFacts()
	if k.state["htb"] != loadable || k.state["netem"] != absent || !strings.Contains(k.note["netem"], "sch_netem.ko is not installed") {
		t.Errorf("htb %v, netem %v (%s); want module, and no: not installed", k.state["htb"], k.state["netem"], k.note["netem"])
	}
}

// On a kernel whose ipset and nf_tables are modules not loaded yet,
// listing sets or tables would load them (the kernel autoloads on the
// netlink request): doctor does not ask, as they could hold nothing.
func TestNoListingThatLoadsModules(t *testing.T) {
	var ran []string
	e := fixture{base: "stock-6.1", ran: &ran, exec: map[string]string{"ipset list -n": "sanqos-dl.q.4\n"}}.env(t)
	Run(e, Checks(e))
	for _, c := range ran {
		if strings.HasPrefix(c, "ipset") || strings.HasPrefix(c, "nft") {
			t.Errorf("ran %q with the module not loaded", c)
		}
	}
	if len(e.iptFacts().stale) != 0 {
		t.Errorf("stale objects %v from a module not loaded", e.iptFacts().stale)
	}
	ran = nil
	e = fixture{base: "stock-6.1", ran: &ran, files: map[string]string{"sys/module/ip_set/refcnt": "2\n"}, exec: map[string]string{"ipset list -n": "sanqos-dl.q.4\n"}}.env(t)
	Run(e, Checks(e))
	if !slices.Contains(ran, "ipset list -n") || fmt.Sprint(e.iptFacts().stale) != "[ipset: sanqos-dl.q.4]" {
		t.Errorf("ip_set loaded: ran %q, stale %v; want the set listed", ran, e.iptFacts().stale)
	}
}
