package doctor

import (
	"fmt"
	"strings"

	"github.com/sanqos/sanqos/throttle"
)

// iptFacts are the netfilter tools installed and the state they show.
type iptFacts struct {
	iptables string // path, "" when not installed
	version  string // `iptables -V`
	variant  string // "legacy", "nf_tables", "" when unknown
	ip6      bool
	nft      bool
	nftErr   error
	nftTabs  []string // `nft list tables`
	tables   []string // /proc/net/ip_tables_names: legacy tables in use
	stale    []string // rules and sets carrying a sanqos label
}

func (e *Env) iptFacts() *iptFacts {
	if e.ipt == nil {
		e.ipt = readIpt(e.Host, e.kernelFacts())
	}
	return e.ipt
}

// readIpt runs only listing commands. Not `iptables -S`: on a namespace
// whose filter table was never used, iptables-legacy would instantiate
// it; iptables-save lists only the tables in ip_tables_names.
//
// Nor does it list what a module not loaded would hold: it holds nothing,
// and asking (ipset's or nf_tables' netlink) makes the kernel load it.
func readIpt(h Host, k *kernelFacts) *iptFacts {
	f := &iptFacts{ip6: h.has("ip6tables"), nft: h.has("nft")}
	inKernel := func(key string) bool { return k.state[key] == builtin || k.state[key] == loaded }
	if p, err := h.LookPath("iptables"); err == nil {
		f.iptables = p
		if out, err := h.Exec("iptables", "-V"); err == nil {
			f.version = strings.TrimSpace(string(out))
			switch {
			case strings.Contains(f.version, "(legacy)"):
				f.variant = "legacy"
			case strings.Contains(f.version, "(nf_tables)"):
				f.variant = "nf_tables"
			}
		}
	}
	if b, err := h.read("/proc/net/ip_tables_names"); err == nil {
		f.tables = strings.Fields(string(b))
	}
	if f.nft && inKernel("nf_tables") {
		out, err := h.Exec("nft", "list", "tables")
		f.nftErr = err
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if t, ok := strings.CutPrefix(l, "table "); ok {
				f.nftTabs = append(f.nftTabs, t)
			}
		}
	}
	if h.has("iptables-save") && (f.variant == "legacy" || inKernel("nf_tables")) {
		if out, err := h.Exec("iptables-save"); err == nil {
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "-A ") && strings.Contains(l, "sanqos") {
					f.stale = append(f.stale, "rule: "+l)
				}
			}
		}
	}
	if h.has("ipset") && inKernel("ipset") {
		if out, err := h.Exec("ipset", "list", "-n"); err == nil {
			for _, s := range strings.Fields(string(out)) {
				if strings.HasPrefix(s, "sanqos") {
					f.stale = append(f.stale, "ipset: "+s)
				}
			}
		}
	}
	return f
}

// iptProblem is why the backend's rules could not be installed, or "".
// queue: the backend sends packets to an NFQUEUE (the delay line).
func (e *Env) iptProblem(queue bool) string {
	f, k := e.iptFacts(), e.kernelFacts()
	absent := func(key string) bool { return k.known(key) && !k.has(key) }
	switch {
	case f.iptables == "":
		return "no iptables program (install Debian's iptables)"
	case f.variant == "nf_tables" && queue && absent("nft_queue"):
		return "iptables is iptables-nft, which turns NFQUEUE into an nft queue rule, and this kernel has no nft queue (CONFIG_NFT_QUEUE): " +
			"update-alternatives --set iptables /usr/sbin/iptables-legacy"
	case f.variant == "nf_tables" && absent("nft_compat"):
		return "iptables is iptables-nft and this kernel has no nft_compat (CONFIG_NFT_COMPAT) for its -m set and -m u32: switch to iptables-legacy"
	case f.variant == "legacy" && absent("ip_tables"):
		return "iptables is iptables-legacy and this kernel has no ip_tables (CONFIG_IP_NF_IPTABLES): switch to iptables-nft (update-alternatives --set iptables /usr/sbin/iptables-nft)"
	}
	return ""
}

func (e *Env) netfilterCheck() Result {
	f, p := e.iptFacts(), e.plan()
	r := Result{Status: OK}
	switch {
	case f.iptables == "":
		r.Summary = "no iptables"
	case f.version == "":
		r.Summary = "iptables (version unknown)"
	default:
		r.Summary = f.version
	}
	r.Detail = append(r.Detail, "iptables: "+orNone(f.iptables)+" "+f.version)
	r.Detail = append(r.Detail, fmt.Sprintf("ip6tables installed: %v (without it IPv6 consumers cannot be throttled by rule)", f.ip6))
	r.Detail = append(r.Detail, "legacy tables in use (/proc/net/ip_tables_names): "+orNone(strings.Join(f.tables, " ")))
	switch {
	case !f.nft:
		r.Detail = append(r.Detail, "nft: not installed")
	case f.nftErr != nil:
		r.Detail = append(r.Detail, "nft list tables: "+f.nftErr.Error())
	default:
		r.Detail = append(r.Detail, "nft tables: "+orNone(strings.Join(f.nftTabs, ", ")))
	}
	if p.uses(throttle.PartIptables) {
		if why := e.iptProblem(p.uses(throttle.PartQueue)); why != "" {
			r.Status, r.Summary = Fail, why
		}
	} else {
		r.Detail = append(r.Detail, "the "+p.chosenOr("chosen")+" backend installs no iptables rules")
	}
	if len(f.stale) > 0 {
		if r.Status == OK {
			r.Status = Warn
			r.Summary += fmt.Sprintf("; %d sanqos rules or sets in this namespace", len(f.stale))
		}
		r.Detail = append(r.Detail, "sanqos objects here (a running or crashed agent's; an agent removes its own label's at start, 'sanqos cleanup --label L' removes a crashed one's):")
		for _, s := range f.stale {
			r.Detail = append(r.Detail, "  "+s)
		}
	}
	return r
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
