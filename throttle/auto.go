package throttle

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Auto picks the best delay backend this kernel runs, trying the delay
// backends of the registry in its order: EDT (fq and tc BPF: the kernel
// holds each packet, no per-packet userspace work), netem (the thesis'
// tree), the NFQUEUE delay line (any kernel with netfilter queueing); it
// logs which one it chose and why. A kernel that has a backend whose
// objects then cannot be built is an error, not a silent fallback: the
// operator asked for the best method and should learn why it is not
// running.
func Auto(o Options) (Throttle, error) {
	w, err := ParseWriteOn(o.WriteOn)
	if err != nil {
		return nil, err
	}
	return auto(delayBackends(), o, w)
}

// autoText is what Auto says of a delay backend. Every one but the last
// is probed: has is what the kernel has when the probe passes (for the
// error if the backend then fails), and logMiss logs a failed probe's
// reason (edt's says which part is missing, fq or BPF; netem's would only
// repeat the fallback's reason). The last is the fallback, built without
// a probe because it runs on any kernel: lacks and why say what the
// kernel missed for the others.
type autoText struct {
	has        string
	logMiss    bool
	lacks, why string
}

func auto(cands []registered, o Options, w WriteOn) (Throttle, error) {
	log := o.logger()
	for _, b := range cands[:len(cands)-1] {
		ok, why, err := b.probe()
		if err != nil {
			// The probe itself failed (no netns or veth): we cannot tell, so
			// take the backend that works on any kernel.
			log.Warn(b.name+" probe failed; using the delay line", "err", err)
			break
		}
		if !ok {
			if b.auto.logMiss {
				log.Info("throttle backend "+b.name+" not available", "reason", why)
			}
			continue
		}
		t, err := b.build(o, w)
		if err != nil {
			return nil, fmt.Errorf("auto: kernel has %s but the %s backend failed: %w", b.auto.has, b.name, err)
		}
		log.Info("throttle backend chosen", "backend", b.name, "reason", why)
		return t, nil
	}
	last := cands[len(cands)-1]
	t, err := last.build(o, w)
	if err != nil {
		return nil, fmt.Errorf("auto: %s, and the delay line failed: %w", last.auto.lacks, err)
	}
	log.Info("throttle backend chosen", "backend", t.Name(), "reason", last.auto.why)
	return t, nil
}

// htbAvailable adds an htb root to a scratch veth.
func htbAvailable() (bool, error) {
	return qdiscAvailable("htb", func(ifindex int) netlink.Qdisc { return tcRootQdisc(ifindex, 1, 2) })
}

// delayLineWriteCapAvailable is the delay line's probe and the write
// caps' together; the reason is the delay line's when it is missing.
func delayLineWriteCapAvailable() (bool, string, error) {
	dl, dlWhy := delayLineAvailable()
	wc, why := writeCapAvailable()
	if !dl {
		why = "needs the delay line: " + dlWhy
	}
	return dl && wc, why, nil
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
		w, err := NewWriteCap(WriteCapConfig{Device: dev.Attrs().Name, Label: "probe", Check: -1, Log: slog.New(slog.DiscardHandler)})
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

// inScratchNS runs f on a veth (sqtprobe0) in a scratch network namespace.
// The thread is never unlocked: when the goroutine ends, Go discards the
// thread, and with it the namespace, so the caller's threads never see it.
func inScratchNS(f func(dev netlink.Link) error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ch <- func() error {
			ns, err := netns.New()
			if err != nil {
				return fmt.Errorf("new namespace: %w", err)
			}
			defer ns.Close()
			la := netlink.NewLinkAttrs()
			la.Name = "sqtprobe0"
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "sqtprobe1"}); err != nil {
				return fmt.Errorf("veth: %w", err)
			}
			link, err := netlink.LinkByName(la.Name)
			if err != nil {
				return err
			}
			return f(link)
		}()
	}()
	return <-ch
}

// qdiscAvailable reports whether the kernel has a qdisc kind, by adding
// the one q builds to a scratch veth.
func qdiscAvailable(kind string, q func(ifindex int) netlink.Qdisc) (bool, error) {
	ok := false
	err := inScratchNS(func(dev netlink.Link) error {
		err := netlink.QdiscAdd(q(dev.Attrs().Index))
		switch {
		case err == nil:
			ok = true
		case tcKindMissing(err):
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("%s probe: %w", kind, err)
	}
	return ok, nil
}
