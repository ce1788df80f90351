package throttle

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink"
)

// Auto picks the best delay backend this kernel runs, in order: EDT (fq
// and tc BPF: the kernel holds each packet, no per-packet userspace
// work), netem (the thesis' tree), the NFQUEUE delay line (any kernel with
// netfilter queueing), and logs which one it chose and why. The EDT and
// delay-line constructors are the caller's (their configuration lives
// with them). A kernel that has a backend whose objects then cannot be
// built is an error, not a silent fallback: the operator asked for the
// best method and should learn why it is not running.
func Auto(cfg NetemConfig, edt, delayLine func() (Throttle, error)) (Throttle, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	ok, why := EDTAvailable()
	if ok {
		t, err := edt()
		if err != nil {
			return nil, fmt.Errorf("auto: kernel has fq and tc BPF but the edt backend failed: %w", err)
		}
		log.Info("throttle backend chosen", "backend", "edt", "reason", why)
		return t, nil
	}
	log.Info("throttle backend edt not available", "reason", why)
	ok, err := NetemAvailable()
	if err != nil {
		// The probe itself failed (no netns or veth): we cannot tell, so
		// take the backend that works on any kernel.
		log.Warn("netem probe failed; using the delay line", "err", err)
		ok = false
	}
	if ok {
		t, err := NewNetem(cfg)
		if err != nil {
			return nil, fmt.Errorf("auto: kernel has netem but the netem backend failed: %w", err)
		}
		log.Info("throttle backend chosen", "backend", "netem", "reason", "kernel has netem")
		return t, nil
	}
	t, err := delayLine()
	if err != nil {
		return nil, fmt.Errorf("auto: no fq and no netem in this kernel, and the delay line failed: %w", err)
	}
	log.Info("throttle backend chosen", "backend", t.Name(), "reason", "kernel has neither fq (for edt) nor netem (CONFIG_NET_SCH_FQ, CONFIG_NET_SCH_NETEM)")
	return t, nil
}

// Backend is one backend as `sanqos throttle backends` lists it.
type Backend struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Why       string `json:"why"`
}

// Backends probes what this kernel runs of every backend, in Auto's order
// of preference first. Probes use scratch namespaces only.
func Backends() []Backend {
	var out []Backend
	ok, why := EDTAvailable()
	out = append(out, Backend{"edt", ok, why})
	ne, err := NetemAvailable()
	out = append(out, Backend{"netem", ne, reason(ne, err, "kernel has netem", ErrNoNetem.Error())})
	dl, dlWhy := delayLineAvailable()
	out = append(out, Backend{"delayline", dl, dlWhy})
	htb, err := qdiscAvailable("htb", func(ifindex int) netlink.Qdisc { return tcRootQdisc(ifindex, 1, 2) })
	out = append(out, Backend{"htb", htb, reason(htb, err, "kernel has htb", "kernel has no htb qdisc (CONFIG_NET_SCH_HTB)")})
	wc, wcWhy := writeCapAvailable()
	both := dl && wc
	if !dl {
		wcWhy = "needs the delay line: " + dlWhy
	}
	out = append(out, Backend{"delayline+htb", both, wcWhy})
	out = append(out, Backend{"dry-run", true, "records settings, touches nothing (tests, shadow agents)"})
	return out
}

func reason(ok bool, err error, yes, no string) string {
	switch {
	case err != nil:
		return err.Error()
	case ok:
		return yes
	}
	return no
}

// delayLineAvailable checks what the NFQUEUE delay line needs: the
// kernel's nfnetlink_queue (its /proc file appears with the module) and
// iptables to install the NFQUEUE rule.
func delayLineAvailable() (bool, string) {
	if _, err := os.Stat("/proc/net/netfilter/nfnetlink_queue"); err != nil && !kernelModule("nfnetlink_queue") {
		return false, "kernel has no nfnetlink_queue (CONFIG_NETFILTER_NETLINK_QUEUE)"
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return false, "no iptables binary for the NFQUEUE rule"
	}
	return true, "kernel has nfnetlink_queue (userspace delay line: a packet's round trip through the agent)"
}

// writeCapAvailable builds the write caps' IFB, HTB tree and steering
// program on a scratch veth.
func writeCapAvailable() (bool, string) {
	err := inScratchNS(func(dev netlink.Link) error {
		w, err := NewWriteCap(WriteCapConfig{Device: dev.Attrs().Name, Label: "probe", Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		return w.Close()
	})
	if err != nil {
		return false, "write caps: " + err.Error()
	}
	return true, "delay line plus write caps (ifb, htb and a tc BPF program work)"
}

// kernelModule reports whether the running kernel ships a module (it then
// loads on first use), from its modules.dep.
func kernelModule(name string) bool {
	rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return false
	}
	dep, err := os.ReadFile("/lib/modules/" + strings.TrimSpace(string(rel)) + "/modules.dep")
	if err != nil {
		return false
	}
	return strings.Contains(string(dep), "/"+name+".ko")
}
