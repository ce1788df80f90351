package throttle

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Choice is auto's pick among its candidates.
type Choice struct {
	Entry Entry
	// Probed: its probe passed. False: the fallback (the last candidate,
	// which runs on any kernel), taken without a probe.
	Probed bool
	Why    string   // the probe's reason, or why the fallback
	Passed []string // the candidates passed over, each "name: why"
	// Err is a probe that could not tell (no netns or veth): auto then
	// takes the fallback.
	Err error
}

// Choose is auto's choice, made once for the agent (probes in scratch
// namespaces) and for doctor (the kernel config): the first candidate
// avail accepts, else the last.
func Choose(avail func(Entry) (ok bool, why string, err error)) Choice {
	return choose(autoCandidates(), avail)
}

func choose(cands []Entry, avail func(Entry) (bool, string, error)) Choice {
	var c Choice
	var names []string
	for _, b := range cands[:len(cands)-1] {
		ok, why, err := avail(b)
		if err != nil {
			c.Err = fmt.Errorf("%s probe: %w", b.Name, err)
			break
		}
		if ok {
			return Choice{Entry: b, Probed: true, Why: why, Passed: c.Passed}
		}
		c.Passed = append(c.Passed, b.Name+": "+why)
		names = append(names, b.Name)
	}
	c.Entry = cands[len(cands)-1]
	c.Why = "kernel runs none of " + strings.Join(names, ", ") + ": " + c.Entry.Name + " " + c.Entry.AutoHas
	if c.Err != nil {
		c.Why = "auto's probes fail here: " + c.Entry.Name + " " + c.Entry.AutoHas
	}
	return c
}

// auto builds the best delay backend this kernel runs, trying the
// candidates in rank order: EDT (fq and tc BPF: the kernel holds each
// packet, no per-packet userspace work), netem (the thesis' tree), the
// NFQUEUE delay line (any kernel with netfilter queueing); it logs which
// one it chose and why. A kernel that has a backend whose objects then
// cannot be built is an error, not a silent fallback: the operator asked
// for the best method and should learn why it is not running.
func auto(cands []Entry, o Options, w WriteOn) (Throttle, error) {
	log := o.logger()
	c := choose(cands, func(b Entry) (bool, string, error) {
		ok, why, err := b.Probe()
		if err == nil && !ok {
			log.Info("throttle backend "+b.Name+" not available", "reason", why)
		}
		return ok, why, err
	})
	if c.Err != nil {
		log.Warn("probe failed; using "+c.Entry.Name, "err", c.Err)
	}
	t, err := c.Entry.Build(o, w)
	switch {
	case err != nil && c.Probed:
		return nil, fmt.Errorf("auto: kernel has %s but the %s backend failed: %w", c.Entry.AutoHas, c.Entry.Name, err)
	case err != nil:
		return nil, fmt.Errorf("auto: %s, and it failed: %w", c.Why, err)
	}
	log.Info("throttle backend chosen", "backend", t.Name(), "reason", c.Why)
	return t, nil
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

// probeConfig is how a probe builds a kernel backend on the scratch
// veth: unguarded, silent.
func probeConfig(dev netlink.Link) tcConfig {
	return tcConfig{Device: dev.Attrs().Name, Label: "probe", Check: -1, Log: slog.New(slog.DiscardHandler)}
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
