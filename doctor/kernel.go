package doctor

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/throttle"
)

// feature is one kernel capability some part of sanqos needs: its key
// is how the other checks name it.
type feature = throttle.Feature

// features are the kernel features the backends need (their registry
// entries': throttle.Features), then those of auto's probes, bridge
// mode, iptables-nft and discovery, in the order the kernel check lists
// them; the check names the backends that need each from the registry.
func features() []feature {
	return append(throttle.Features(),
		own("ip_tables", "iptables-legacy", "CONFIG_IP_NF_IPTABLES", "ip_tables"),
		own("nf_tables", "nf_tables (iptables-nft, nft)", "CONFIG_NF_TABLES", "nf_tables"),
		nftCompat,
		own("nft_queue", "iptables-nft's NFQUEUE (nft queue)", "CONFIG_NFT_QUEUE", "nft_queue"),
		own("netns", "network namespaces (auto's probes)", "CONFIG_NET_NS", ""),
		own("veth", "veth (auto's probes)", "CONFIG_VETH", "veth"),
		own("packet", "AF_PACKET capture (bridge mode)", "CONFIG_PACKET", "af_packet"),
		own("configfs", "configfs (LIO discovery)", "CONFIG_CONFIGFS_FS", "configfs"),
		own("lio", "LIO iSCSI target", "CONFIG_ISCSI_TARGET", "iscsi_target_mod"))
}

// nftCompat stands for iptables-legacy's tables under iptables-nft.
var nftCompat = own("nft_compat", "iptables-nft's xt matches and targets", "CONFIG_NFT_COMPAT", "nft_compat")

func own(key, what, symbol, module string) feature {
	return feature{Key: key, What: what, Symbol: symbol, Module: module}
}

// neededBy names the backends whose Needs (with either write_delay_on)
// list key.
func neededBy(key string) string {
	var names []string
	for _, b := range throttle.Entries() {
		for _, w := range []throttle.WriteOn{throttle.WriteOnReplies, throttle.WriteOnACKs} {
			if slices.ContainsFunc(b.Needs(w), func(alts []feature) bool {
				return slices.ContainsFunc(alts, func(f feature) bool { return f.Key == key })
			}) && !slices.Contains(names, b.Name) {
				names = append(names, b.Name)
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}

// state is whether the running kernel has a feature.
type state int

const (
	unknown state = iota // no kernel config to tell
	absent               // not configured, or a module that is not installed
	builtin
	loaded   // a module, loaded now
	loadable // a module, installed: the kernel loads it on first use
)

func (s state) present() bool { return s >= builtin }

func (s state) String() string {
	return [...]string{"unknown", "no", "built in", "module, loaded", "module"}[s]
}

// kernelFacts is what the kernel check found, shared with the checks
// that decide by it.
type kernelFacts struct {
	release string
	source  string // the kernel config read, "" if none was found
	config  map[string]string
	state   map[string]state
	note    map[string]string // why a feature is absent or unknown
}

func (k *kernelFacts) has(key string) bool { return k.state[key].present() }

// known reports whether the kernel config said anything about key.
func (k *kernelFacts) known(key string) bool { return k.state[key] != unknown }

func (e *Env) kernelFacts() *kernelFacts {
	if e.kernel == nil {
		e.kernel = readKernel(e.Host)
	}
	return e.kernel
}

// readKernel prefers the running kernel's own config (/proc/config.gz,
// CONFIG_IKCONFIG_PROC) over the distribution's copy in /boot, and tells a
// module that is installed from one that is only configured, as Debian's
// kernel packages configure far more than a host may ship.
func readKernel(h Host) *kernelFacts {
	k := &kernelFacts{state: map[string]state{}, note: map[string]string{}}
	rel, _ := h.read("/proc/sys/kernel/osrelease")
	k.release = strings.TrimSpace(string(rel))
	if b, err := h.read("/proc/config.gz"); err == nil {
		if cfg, err := gunzip(b); err == nil {
			k.source, k.config = "/proc/config.gz", parseKconfig(cfg)
		}
	}
	if k.source == "" && k.release != "" {
		p := "/boot/config-" + k.release
		if b, err := h.read(p); err == nil {
			k.source, k.config = p, parseKconfig(b)
		}
	}
	dep, _ := h.read("/lib/modules/" + k.release + "/modules.dep")
	for _, f := range features() {
		k.state[f.Key], k.note[f.Key] = featureState(h, k, f, dep)
	}
	return k
}

func featureState(h Host, k *kernelFacts, f feature, dep []byte) (state, string) {
	isLoaded := f.Module != "" && h.exists("/sys/module/"+f.Module)
	if k.source == "" {
		if isLoaded {
			return loaded, ""
		}
		return unknown, "no kernel config (/proc/config.gz or /boot/config-" + k.release + ")"
	}
	switch k.config[f.Symbol] {
	case "y":
		return builtin, ""
	case "m":
		if isLoaded {
			return loaded, ""
		}
		if bytes.Contains(dep, []byte("/"+f.Module+".ko")) {
			return loadable, ""
		}
		return absent, f.Symbol + "=m but " + f.Module + ".ko is not installed (modules.dep)"
	}
	return absent, f.Symbol + " is not set"
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	// The kernel's config is ~250 KB; bound it against a corrupt file.
	return io.ReadAll(io.LimitReader(r, 16<<20))
}

// parseKconfig reads "CONFIG_X=y" lines; "# CONFIG_X is not set" and
// anything else leave X out, which is what not set means.
func parseKconfig(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok && strings.HasPrefix(k, "CONFIG_") {
			out[k] = v
		}
	}
	return out
}

// Run lists every feature; it never fails on its own, since a missing
// feature only matters to the backend that needs it (the backend check
// decides that). It warns when it cannot tell, because then the backend
// check cannot either.
func (e *Env) kernelCheck() Result {
	k := e.kernelFacts()
	var have, lack []string
	for _, key := range []string{"netem", "fq", "htb", "clsact", "cls_bpf", "nfqueue", "ipset", "xt_set", "nf_tables"} {
		switch k.state[key] {
		case unknown:
		case absent:
			lack = append(lack, key)
		default:
			have = append(have, key)
		}
	}
	var r Result
	for _, f := range features() {
		line := fmt.Sprintf("%-15s %-15s %s%s", f.Key, k.state[f.Key], f.What, neededBy(f.Key))
		if n := k.note[f.Key]; n != "" && k.source != "" {
			line += " — " + n
		}
		r.Detail = append(r.Detail, line)
	}
	if k.source == "" {
		r.Status = Warn
		r.Summary = fmt.Sprintf("%s: no kernel config (/proc/config.gz, /boot/config-%s): features only known when their module is loaded", k.release, k.release)
		r.Detail = append(r.Detail, "'sanqos throttle backends' probes by building each backend in a scratch network namespace (as the agent's auto does); doctor does not, as it changes nothing")
		return r
	}
	r.Summary = fmt.Sprintf("%s (%s): has %s", k.release, k.source, strings.Join(have, ", "))
	if len(lack) > 0 {
		r.Summary += "; lacks " + strings.Join(lack, ", ")
	}
	return r
}
