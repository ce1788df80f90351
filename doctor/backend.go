package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// part is a kind of kernel object a backend builds, which decides what
// else it needs (a device, iptables, a queue, BPF rights).
type part int

const (
	partDevice   part = iota // qdiscs on the interface towards the consumers
	partIptables             // rules and ipsets
	partQueue                // an NFQUEUE binding
	partBPF                  // a tc BPF program
)

var backendParts = map[string][]part{
	"edt":           {partDevice, partBPF},
	"netem":         {partDevice, partIptables},
	"htb":           {partDevice, partIptables},
	"delayline":     {partIptables, partQueue},
	"delayline+htb": {partDevice, partIptables, partQueue, partBPF},
	"dry-run":       nil,
}

// plan is doctor's prediction of what cmd/sanqos' newBackend would build.
type plan struct {
	asked  string   // the backend the agent is asked for
	chosen string   // the one it would build
	why    []string // how it got there
	fail   string   // why building it would fail; "" if it would not
	unsure []string // what doctor cannot tell without the kernel config
	// lost is the better backend auto passes over because its probes
	// cannot run here ("" when none).
	lost      string
	device    string
	deviceErr error
}

func (p *plan) uses(x part) bool { return slices.Contains(backendParts[p.chosen], x) }

func (p *plan) chosenOr(s string) string {
	if p.chosen == "" {
		return s
	}
	return p.chosen
}

// featureNeeds lists what backend name needs of the kernel, each entry a
// set of alternatives. With iptables-nft, xt matches and targets go
// through nft_compat and NFQUEUE becomes nft's queue expression.
func (e *Env) featureNeeds(name string) [][]string {
	nft := e.iptFacts().variant == "nf_tables"
	table := func(t string) []string {
		if nft {
			return []string{"nft_compat"}
		}
		return []string{t}
	}
	sets := [][]string{{"ipset"}, {"ipset_hash_ip"}, {"xt_set"}, {"xt_comment"}}
	mark := append([][]string{{"htb"}, {"cls_fw", "cls_u32"}, table("iptable_mangle")}, sets...)
	bpf := [][]string{{"clsact"}, {"cls_bpf"}, {"bpf"}}
	switch name {
	case "edt":
		return append([][]string{{"fq"}}, bpf...)
	case "netem":
		// Its mark rules tell pure ACKs with -m u32 (tcPureACK).
		return append([][]string{{"netem"}, {"xt_u32"}}, mark...)
	case "htb":
		return mark
	case "delayline", "delayline+htb":
		n := append([][]string{{"nfqueue"}, table("iptable_filter")}, sets...)
		if !nft {
			// iptables-nft's queue is nft's own (iptProblem).
			n = append(n, []string{"xt_NFQUEUE"})
		}
		if e.Config.WriteDelayOn != "acks" {
			// Replies leave pure ACKs out of the queue by -m u32.
			n = append(n, []string{"xt_u32"})
		}
		if name == "delayline+htb" {
			n = append(append(n, []string{"ifb"}, []string{"htb"}, []string{"mirred"}), bpf...)
		}
		return n
	}
	return nil
}

// lacking splits name's needs into those the kernel lacks and those the
// kernel config does not tell.
func (e *Env) lacking(name string) (missing, unknown []string) {
	k := e.kernelFacts()
	for _, alts := range e.featureNeeds(name) {
		if slices.ContainsFunc(alts, k.has) {
			continue
		}
		if slices.ContainsFunc(alts, func(a string) bool { return !k.known(a) }) {
			unknown = append(unknown, strings.Join(alts, "|"))
			continue
		}
		var syms []string
		for _, a := range alts {
			syms = append(syms, symbolOf(a))
		}
		missing = append(missing, strings.Join(syms, " or "))
	}
	return missing, unknown
}

func symbolOf(key string) string {
	for _, f := range features {
		if f.key == key {
			return f.symbol
		}
	}
	return key
}

func (e *Env) plan() *plan {
	if e.planned != nil {
		return e.planned
	}
	p := &plan{asked: e.backendName()}
	e.planned = p
	p.device, p.deviceErr = e.resolveDevice()
	switch p.asked {
	case "auto":
		e.planAuto(p)
	case "dry-run":
		p.chosen, p.why = "dry-run", []string{"dry-run records settings and touches nothing"}
		return p
	default:
		if _, ok := backendParts[p.asked]; !ok {
			p.fail = fmt.Sprintf("unknown backend %q", p.asked)
			return p
		}
		p.chosen, p.why = p.asked, []string{"the config asks for " + p.asked}
	}
	e.checkBuild(p)
	return p
}

// planAuto follows throttle.Auto: edt if its probe builds it, else netem
// if the kernel has the qdisc, else the delay line. Auto's probes run in a
// scratch network namespace, so without the right to create one (or
// without netns and veth) both fail and auto takes the delay line.
func (e *Env) planAuto(p *plan) {
	k, caps := e.kernelFacts(), e.capFacts()
	edtMissing, edtUnknown := e.lacking("edt")
	kernelEDT := len(edtMissing) == 0 && len(edtUnknown) == 0
	noNS := func(key string) bool { return k.known(key) && !k.has(key) }
	if !caps.has(capSysAdmin) || noNS("netns") || noNS("veth") {
		p.chosen = "delayline"
		p.why = []string{"auto's probes create a scratch network namespace with a veth, which needs CAP_SYS_ADMIN and a kernel with netns and veth; " +
			"here they would fail, and auto takes the delay line"}
		switch {
		case kernelEDT:
			p.lost = "edt"
		case k.has("netem"):
			p.lost = "netem"
		}
		return
	}
	switch {
	case kernelEDT:
		p.chosen, p.why = "edt", []string{"kernel has fq and tc BPF: edt (the kernel holds each packet)"}
		return
	case len(edtUnknown) > 0:
		p.unsure = append(p.unsure, "whether auto's edt probe succeeds (unknown: "+strings.Join(edtUnknown, ", ")+")")
	default:
		p.why = append(p.why, "edt: kernel lacks "+strings.Join(edtMissing, ", "))
	}
	switch k.state["netem"] {
	case unknown:
		p.unsure = append(p.unsure, "whether the kernel has netem")
	case absent:
		p.why = append(p.why, "netem: kernel lacks CONFIG_NET_SCH_NETEM")
	default:
		p.chosen = "netem"
		p.why = append(p.why, "kernel has netem: the thesis' HTB tree with netem leaves")
		return
	}
	p.chosen = "delayline"
	p.why = append(p.why, "neither fq (for edt) nor netem: the NFQUEUE delay line (userspace, a round trip per packet)")
}

// checkBuild says whether the chosen backend's constructor would succeed,
// with the agent's wording where the agent has one.
func (e *Env) checkBuild(p *plan) {
	prefix := ""
	if p.asked == "auto" && p.chosen != "delayline" {
		prefix = "auto: kernel has " + map[string]string{"edt": "fq and tc BPF", "netem": "netem"}[p.chosen] +
			" but the " + p.chosen + " backend would fail: "
	}
	missing, unknown := e.lacking(p.chosen)
	if len(unknown) > 0 {
		p.unsure = append(p.unsure, "whether the kernel has "+strings.Join(unknown, ", "))
	}
	switch {
	case len(missing) > 0:
		p.fail = fmt.Sprintf("%sthe %s backend needs %s, which this kernel lacks", prefix, p.chosen, strings.Join(missing, ", "))
	case p.uses(partDevice) && p.deviceErr != nil:
		p.fail = prefix + p.deviceErr.Error()
	case p.uses(partIptables) && e.iptProblem(p.uses(partQueue)) != "":
		p.fail = prefix + e.iptProblem(p.uses(partQueue))
	case p.uses(partQueue) && e.queueTaken() != "":
		p.fail = fmt.Sprintf("%sNFQUEUE %d is taken by %s", prefix, agentQueue, e.queueTaken())
	}
}

type backendCheck struct{ e *Env }

func (backendCheck) Name() string { return "backend" }

func (c backendCheck) Run() Result {
	p := c.e.plan()
	r := Result{Status: OK, Detail: p.why}
	r.Summary = p.asked
	if p.chosen != "" && p.chosen != p.asked {
		r.Summary += " → " + p.chosen
	}
	if p.chosen != "" && p.chosen != "dry-run" {
		r.Detail = append(r.Detail, c.e.needsLine(p.chosen))
	}
	switch {
	case p.fail != "":
		r.Status, r.Summary = Fail, r.Summary+": "+p.fail
	case p.lost != "":
		r.Status = Warn
		r.Summary += fmt.Sprintf(": this kernel runs %s, but auto's probes cannot run here (capabilities)", p.lost)
	case len(p.unsure) > 0:
		r.Status = Warn
		r.Summary += ": cannot tell " + strings.Join(p.unsure, "; ")
	case len(p.why) > 0:
		r.Summary += ": " + p.why[len(p.why)-1]
	}
	if p.uses(partDevice) && p.deviceErr == nil {
		r.Detail = append(r.Detail, "throttles on "+p.device)
	}
	if p.chosen == "netem" {
		r.Detail = append(r.Detail, "netem delays IPv4 consumers only: an IPv6 one is named in the agent's log and apply errors, the others are delayed")
	}
	if p.asked == "auto" {
		r.Detail = append(r.Detail, "doctor predicts auto from the kernel config; the agent decides by building each backend in a scratch network namespace "+
			"(throttle.EDTAvailable, NetemAvailable), which doctor does not do as it changes nothing. 'sanqos throttle backends' runs those probes")
	}
	return r
}

// needsLine lists a backend's kernel needs with the kernel's answer.
func (e *Env) needsLine(name string) string {
	k := e.kernelFacts()
	var parts []string
	for _, alts := range e.featureNeeds(name) {
		var s []string
		for _, a := range alts {
			s = append(s, a+" "+k.state[a].String())
		}
		parts = append(parts, strings.Join(s, " | "))
	}
	return name + " needs: " + strings.Join(parts, ", ")
}
