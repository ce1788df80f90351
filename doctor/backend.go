package doctor

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/throttle"
)

// plan is doctor's prediction of what cmd/sanqos' newBackend would build,
// from the throttle registry's entries.
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

func (p *plan) entry() throttle.Entry { e, _ := throttle.Lookup(p.chosen); return e }

func (p *plan) uses(x throttle.Part) bool { return p.entry().Parts&x != 0 }

func (p *plan) chosenOr(s string) string {
	if p.chosen == "" {
		return s
	}
	return p.chosen
}

// featureNeeds lists what backend name needs of the kernel (its registry
// entry's Needs), each entry a set of alternatives. With iptables-nft, xt
// matches and targets go through nft_compat, and NFQUEUE becomes nft's
// queue expression (iptProblem checks that).
func (e *Env) featureNeeds(name string) [][]feature {
	b, ok := throttle.Lookup(name)
	if !ok {
		return nil
	}
	w, _ := throttle.ParseWriteOn(e.Config.WriteDelayOn)
	return e.nftNeeds(b.Needs(w))
}

func (e *Env) nftNeeds(needs [][]feature) [][]feature {
	if e.iptFacts().variant != "nf_tables" {
		return needs
	}
	var out [][]feature
	for _, alts := range needs {
		switch key := alts[0].Key; {
		case len(alts) == 1 && key == "xt_NFQUEUE":
		case len(alts) == 1 && strings.HasPrefix(key, "iptable_"):
			out = append(out, []feature{nftCompat})
		default:
			out = append(out, alts)
		}
	}
	return out
}

// lacking splits name's needs into those the kernel lacks and those the
// kernel config does not tell.
func (e *Env) lacking(name string) (missing, unknown []string) {
	return e.lackingOf(e.featureNeeds(name))
}

func (e *Env) lackingOf(needs [][]feature) (missing, unknown []string) {
	k := e.kernelFacts()
	for _, alts := range needs {
		if slices.ContainsFunc(alts, func(f feature) bool { return k.has(f.Key) }) {
			continue
		}
		var keys, syms []string
		for _, f := range alts {
			keys, syms = append(keys, f.Key), append(syms, f.Symbol)
		}
		if slices.ContainsFunc(alts, func(f feature) bool { return !k.known(f.Key) }) {
			unknown = append(unknown, strings.Join(keys, "|"))
			continue
		}
		missing = append(missing, strings.Join(syms, " or "))
	}
	return missing, unknown
}

func (e *Env) plan() *plan {
	if e.planned != nil {
		return e.planned
	}
	p := &plan{asked: e.backendName()}
	e.planned = p
	p.device, p.deviceErr = e.resolveDevice()
	b, ok := throttle.Lookup(p.asked)
	switch {
	case p.asked == "auto":
		e.planAuto(p)
	case !ok:
		p.fail = fmt.Sprintf("unknown backend %q", p.asked)
		return p
	case b.Parts == 0:
		p.chosen, p.why = p.asked, []string{p.asked + ": " + b.About}
		return p
	default:
		p.chosen, p.why = p.asked, []string{"the config asks for " + p.asked}
	}
	e.checkBuild(p)
	return p
}

// planAuto predicts auto's choice (throttle.Choose) from the kernel config,
// where the agent runs each probe in a scratch network namespace. Without
// the right to create one (or without netns and veth) every probe fails
// and auto takes its fallback.
func (e *Env) planAuto(p *plan) {
	k, caps := e.kernelFacts(), e.capFacts()
	noNS := func(key string) bool { return k.known(key) && !k.has(key) }
	noProbes := !caps.has(capSysAdmin) || noNS("netns") || noNS("veth")
	kernelOnly := func(b throttle.Entry) (bool, string, error) {
		missing, unknown := e.lackingOf(e.nftNeeds(b.Probes))
		switch {
		case len(unknown) > 0:
			p.unsure = append(p.unsure, "whether auto's "+b.Name+" probe succeeds (unknown: "+strings.Join(unknown, ", ")+")")
			return false, "unknown", nil
		case len(missing) > 0:
			return false, "kernel lacks " + strings.Join(missing, ", "), nil
		}
		return true, "kernel has " + b.AutoHas + ": " + b.Name + " (" + b.About + ")", nil
	}
	if noProbes {
		// What the kernel would run, had auto's probes run.
		if c := throttle.Choose(kernelOnly); c.Probed {
			p.lost = c.Entry.Name
		}
		p.unsure = nil
	}
	c := throttle.Choose(func(b throttle.Entry) (bool, string, error) {
		if noProbes {
			return false, "", errors.New("no scratch namespace")
		}
		return kernelOnly(b)
	})
	p.chosen = c.Entry.Name
	p.why = c.Passed
	if c.Err != nil {
		p.why = []string{"auto's probes create a scratch network namespace with a veth, which needs CAP_SYS_ADMIN and a kernel with netns and veth; " +
			"here they would fail, and auto takes " + c.Entry.Name}
		return
	}
	p.why = append(p.why, c.Why)
}

// checkBuild says whether the chosen backend's constructor would succeed,
// with the agent's wording where the agent has one.
func (e *Env) checkBuild(p *plan) {
	prefix := ""
	if b := p.entry(); p.asked == "auto" && b.Probes != nil {
		prefix = "auto: kernel has " + b.AutoHas + " but the " + p.chosen + " backend would fail: "
	}
	missing, unknown := e.lacking(p.chosen)
	if len(unknown) > 0 {
		p.unsure = append(p.unsure, "whether the kernel has "+strings.Join(unknown, ", "))
	}
	switch {
	case len(missing) > 0:
		p.fail = fmt.Sprintf("%sthe %s backend needs %s, which this kernel lacks", prefix, p.chosen, strings.Join(missing, ", "))
	case p.uses(throttle.PartDevice) && p.deviceErr != nil:
		p.fail = prefix + p.deviceErr.Error()
	case p.uses(throttle.PartIptables) && e.iptProblem(p.uses(throttle.PartQueue)) != "":
		p.fail = prefix + e.iptProblem(p.uses(throttle.PartQueue))
	case p.uses(throttle.PartQueue) && e.queueTaken() != "":
		p.fail = fmt.Sprintf("%sNFQUEUE %d is taken by %s", prefix, agentQueue, e.queueTaken())
	}
}

func (e *Env) backendCheck() Result {
	p := e.plan()
	r := Result{Status: OK, Detail: p.why}
	r.Summary = p.asked
	if p.chosen != "" && p.chosen != p.asked {
		r.Summary += " → " + p.chosen
	}
	if p.entry().Parts != 0 {
		r.Detail = append(r.Detail, e.needsLine(p.chosen))
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
	if p.uses(throttle.PartDevice) && p.deviceErr == nil {
		r.Detail = append(r.Detail, "throttles on "+p.device)
	}
	if b := p.entry(); b.Parts != 0 && !b.Caps.IPv6 {
		r.Detail = append(r.Detail, p.chosen+" throttles IPv4 consumers only: an IPv6 one is named in the agent's log and apply errors, the others are throttled")
	}
	if p.asked == "auto" {
		r.Detail = append(r.Detail, "doctor predicts auto from the kernel config; the agent decides by building each backend in a scratch network namespace "+
			"(each backend's probe in the throttle registry), which doctor does not do as it changes nothing. 'sanqos throttle backends' runs those probes")
	}
	return r
}

// needsLine lists a backend's kernel needs with the kernel's answer.
func (e *Env) needsLine(name string) string {
	k := e.kernelFacts()
	var parts []string
	for _, alts := range e.featureNeeds(name) {
		var s []string
		for _, f := range alts {
			s = append(s, f.Key+" "+k.state[f.Key].String())
		}
		parts = append(parts, strings.Join(s, " | "))
	}
	return name + " needs: " + strings.Join(parts, ", ")
}
