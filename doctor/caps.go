package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/throttle"
)

// Capability bits (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capSysAdmin = 21
	capBPF      = 39
)

var capNames = map[int]string{capNetAdmin: "CAP_NET_ADMIN", capNetRaw: "CAP_NET_RAW", capSysAdmin: "CAP_SYS_ADMIN", capBPF: "CAP_BPF"}

// capFacts are the effective capabilities and user of this process, from
// /proc/self/status: what the agent would hold if started the same way.
type capFacts struct {
	eff  uint64
	euid int
	err  error
}

func (c *capFacts) has(bit int) bool { return c.err == nil && c.eff&(1<<bit) != 0 }

func (e *Env) capFacts() *capFacts {
	if e.caps == nil {
		e.caps = readCaps(e.Host)
	}
	return e.caps
}

func readCaps(h Host) *capFacts {
	c := &capFacts{euid: -1}
	b, err := h.read("/proc/self/status")
	if err != nil {
		c.err = err
		return c
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		switch {
		case k == "CapEff" && len(f) == 1:
			c.eff, err = strconv.ParseUint(f[0], 16, 64)
			found = err == nil
		case k == "Uid" && len(f) >= 2:
			c.euid, _ = strconv.Atoi(f[1])
		}
	}
	if !found {
		c.err = fmt.Errorf("/proc/self/status has no readable CapEff line")
	}
	return c
}

// capNeed is one capability the agent would need, and for what.
type capNeed struct {
	bits []int // any one of them will do
	why  string
	must bool // without it the agent fails; else it only runs worse
}

// capNeeds are what the backend the plan chose, the mode and auto's
// probes need. Netlink writes (tc, ipset, nfqueue) need CAP_NET_ADMIN;
// iptables-legacy talks over a raw socket (CAP_NET_RAW), as does bridge
// mode's capture; loading a tc BPF program needs CAP_BPF (or, before 5.8,
// CAP_SYS_ADMIN); auto's probes create a network namespace
// (CAP_SYS_ADMIN). The tc backends' mark lease needs no setns in the
// agent: its threads share one namespace.
func (e *Env) capNeeds() []capNeed {
	p := e.plan()
	var out []capNeed
	if p.entry().Parts != 0 {
		out = append(out, capNeed{[]int{capNetAdmin}, "tc, ipset, nfqueue and iptables changes", true})
	}
	if p.uses(throttle.PartIptables) && e.iptFacts().variant != "nf_tables" {
		out = append(out, capNeed{[]int{capNetRaw}, "iptables-legacy's raw socket", true})
	}
	if e.Config.Mode == "bridge" && e.configured() {
		out = append(out, capNeed{[]int{capNetRaw}, "bridge mode's packet capture", true})
	}
	if p.uses(throttle.PartBPF) {
		out = append(out, capNeed{[]int{capBPF, capSysAdmin}, "loading the tc BPF program", true})
	}
	if e.backendName() == "auto" {
		out = append(out, capNeed{[]int{capSysAdmin}, "auto's probes (a scratch network namespace); without it auto takes the delay line", false})
	}
	return out
}

func (e *Env) capsCheck() Result {
	f := e.capFacts()
	if f.err != nil {
		return Result{Status: Fail, Summary: "cannot read this process' capabilities: " + f.err.Error()}
	}
	r := Result{Status: OK}
	var missing []string
	for _, n := range e.capNeeds() {
		held := false
		var names []string
		for _, b := range n.bits {
			held = held || f.has(b)
			names = append(names, capNames[b])
		}
		mark := "held"
		if !held {
			mark = "MISSING"
			missing = append(missing, strings.Join(names, " or "))
			if n.must {
				r.Status = Fail
			} else if r.Status == OK {
				r.Status = Warn
			}
		}
		r.Detail = append(r.Detail, fmt.Sprintf("%-27s %-7s %s", strings.Join(names, " or "), mark, n.why))
	}
	if f.euid != 0 {
		r.Detail = append(r.Detail, fmt.Sprintf("uid %d: the agent runs as root (its socket directory and tgtd's control socket are root's)", f.euid))
		if r.Status == OK {
			r.Status = Warn
		}
	}
	r.Detail = append(r.Detail, "these are doctor's own capabilities; packaging/sanqos.service gives the agent CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_SYS_ADMIN (docs/doctor.md: run doctor as the unit runs)")
	switch {
	case len(missing) == 0:
		r.Summary = fmt.Sprintf("uid %d holds what the agent needs (CapEff %#x)", f.euid, f.eff)
	default:
		r.Summary = fmt.Sprintf("uid %d lacks %s", f.euid, strings.Join(missing, ", "))
	}
	return r
}
