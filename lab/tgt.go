package lab

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Tgtadm talks to bm's tgtd (the only one in a single-target lab).
func Tgtadm(args ...string) (string, error) { return tgtadmOn(Target(0), args...) }

// tgtadmOn runs tgtadm on t's control port, bounded by Limits.Tgtadm: one
// stuck on a tgtd that no longer answered hung `lab down` for 11 minutes
// (issue 56).
func tgtadmOn(t TargetHost, args ...string) (string, error) {
	return runTimeout(Limits.Tgtadm, nil, "tgtadm", append([]string{"-C", t.port(), "--lld", "iscsi"}, args...)...)
}

func tgtSocket(t TargetHost) string { return fmt.Sprintf("/var/run/tgtd/socket.%d", t.CtlPort) }

// TgtReady reports whether bm's tgtd answers on its control port.
func TgtReady() bool { return tgtReadyOn(Target(0)) }

func tgtReadyOn(t TargetHost) bool {
	_, err := runTimeout(Limits.Tgtadm, nil, "tgtadm", "-C", t.port(), "--op", "show", "--mode", "sys")
	return err == nil
}

// TgtsReady reports whether every target host's tgtd answers.
func (s *State) TgtsReady() bool {
	for _, t := range s.Options.TargetHosts() {
		if !tgtReadyOn(t) {
			return false
		}
	}
	return true
}

// configureTargetsLog creates, on every target host, one target per
// resource with one LUN per host that connects through it, saying on log
// (nil: nowhere) which backing store goes without O_DIRECT and why. It
// skips targets that already exist, so a re-run after a tgtd restart
// restores exactly the lab's configuration.
func configureTargetsLog(s *State, log io.Writer) error {
	for _, t := range s.Options.TargetHosts() {
		if err := configureTargetsOn(s, t, log); err != nil {
			return fmt.Errorf("%s: %w", t.NS, err)
		}
	}
	return nil
}

func configureTargetsOn(s *State, t TargetHost, log io.Writer) error {
	out, err := tgtadmOn(t, "--op", "show", "--mode", "target")
	if err != nil {
		return err
	}
	for _, r := range s.targets() {
		var luns []LUN
		for _, l := range r.LUNs {
			if l.target() == t.NS {
				luns = append(luns, l)
			}
		}
		if len(luns) == 0 || strings.Contains(out, r.IQN+"\n") {
			continue
		}
		tid := strconv.Itoa(r.TID)
		if _, err := tgtadmOn(t, "--op", "new", "--mode", "target", "--tid", tid, "-T", r.IQN); err != nil {
			return err
		}
		for _, l := range luns {
			flags, note := DirectIOFlags(l.Backing)
			if note != "" && log != nil {
				fmt.Fprintln(log, note)
			}
			if _, err := tgtadmOn(t, append([]string{"--op", "new", "--mode", "logicalunit", "--tid", tid, "--lun", strconv.Itoa(l.Number),
				"--backing-store", l.Backing}, flags...)...); err != nil {
				return err
			}
		}
		if _, err := tgtadmOn(t, "--op", "bind", "--mode", "target", "--tid", tid, "-I", "ALL"); err != nil {
			return err
		}
	}
	return nil
}

// target is the namespace of the target host the LUN is served by.
func (l LUN) target() string {
	if l.Target == "" {
		return TargetNS
	}
	return l.Target
}

// stopTgtdOrderly shuts down the tgtd of t that answers on its control
// port the way it listens to (it ignores SIGTERM): offline, delete every
// target, delete the system; every call bounded by Limits.Tgtadm. It
// gives up at the first call that fails: a tgtd that did not answer one
// will not answer the next, and the caller goes on to signals. Only the
// supervisor calls it, and only when that tgtd is its own.
func stopTgtdOrderly(t TargetHost) error {
	if _, err := tgtadmOn(t, "--op", "update", "--mode", "sys", "--name", "State", "-v", "offline"); err != nil {
		return err
	}
	out, err := tgtadmOn(t, "--op", "show", "--mode", "target")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		var tid int
		var name string
		if n, _ := fmt.Sscanf(line, "Target %d: %s", &tid, &name); n == 2 {
			if _, err := tgtadmOn(t, "--op", "delete", "--mode", "target", "--tid", strconv.Itoa(tid), "--force"); err != nil {
				return err
			}
		}
	}
	_, err = runTimeout(Limits.Tgtadm, nil, "tgtadm", "-C", t.port(), "--op", "delete", "--mode", "system")
	return err
}

// removeTgtdSockets removes t's control socket files once no tgtd with
// its port runs.
func removeTgtdSockets(t TargetHost) {
	if len(tgtdPids(t)) == 0 {
		os.Remove(tgtSocket(t))
		os.Remove(tgtSocket(t) + ".lock")
	}
}

// TargetPid is the pid of the first target's tgtd (0 if none runs): a
// process in the target's namespace, whose /proc/PID/net the lab reads
// the target's TCP counters from when no agent runs there.
func TargetPid() int {
	if pids := tgtdPids(Target(0)); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// tgtdPids are the pids of the tgtd processes listening on t's control port.
func tgtdPids(t TargetHost) []int {
	return FindProcs(func(argv []string) bool { return tgtdPort(argv) == t.port() })
}

// IsOurTgtd matches tgtd processes started with one of our control ports.
func IsOurTgtd(argv []string) bool {
	p := tgtdPort(argv)
	return slices.ContainsFunc(allTargets(), func(t TargetHost) bool { return t.port() == p })
}

// tgtdPort is a tgtd command line's control port ("" if not tgtd).
func tgtdPort(argv []string) string {
	if len(argv) == 0 || filepath.Base(argv[0]) != "tgtd" {
		return ""
	}
	for i, a := range argv {
		if (a == "-C" || a == "--control-port") && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}
