package lab

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

var tgtPort = strconv.Itoa(TgtdPort)

func tgtadm(args ...string) (string, error) {
	return run("tgtadm", append([]string{"-C", tgtPort, "--lld", "iscsi"}, args...)...)
}

func tgtSocket() string { return fmt.Sprintf("/var/run/tgtd/socket.%d", TgtdPort) }

// tgtReady reports whether our tgtd answers on its control port.
func tgtReady() bool {
	_, err := run("tgtadm", "-C", tgtPort, "--op", "show", "--mode", "sys")
	return err == nil
}

// configureTargets creates one target per resource with one LUN per host.
// It skips targets that already exist, so a re-run after a tgtd restart
// restores exactly the lab's configuration.
func configureTargets(s *State) error {
	return configureTargetsLog(s, nil)
}

// configureTargetsLog is configureTargets, saying on log (nil: nowhere)
// which backing store goes without O_DIRECT and why.
func configureTargetsLog(s *State, log io.Writer) error {
	out, err := tgtadm("--op", "show", "--mode", "target")
	if err != nil {
		return err
	}
	for _, r := range s.targets() {
		if strings.Contains(out, r.IQN+"\n") {
			continue
		}
		tid := strconv.Itoa(r.TID)
		if _, err := tgtadm("--op", "new", "--mode", "target", "--tid", tid, "-T", r.IQN); err != nil {
			return err
		}
		for _, l := range r.LUNs {
			flags, note := directIOFlags(l.Backing)
			if note != "" && log != nil {
				fmt.Fprintln(log, note)
			}
			if _, err := tgtadm(append([]string{"--op", "new", "--mode", "logicalunit", "--tid", tid, "--lun", strconv.Itoa(l.Number),
				"--backing-store", l.Backing}, flags...)...); err != nil {
				return err
			}
		}
		if _, err := tgtadm("--op", "bind", "--mode", "target", "--tid", tid, "-I", "ALL"); err != nil {
			return err
		}
	}
	return nil
}

// stopTgtd shuts our tgtd down the way it listens to (it ignores SIGTERM):
// offline, delete every target, delete the system; then SIGKILL whatever
// still runs with our control port.
func stopTgtd() {
	if tgtReady() {
		tgtadm("--op", "update", "--mode", "sys", "--name", "State", "-v", "offline")
		out, _ := tgtadm("--op", "show", "--mode", "target")
		for _, line := range strings.Split(out, "\n") {
			var tid int
			var name string
			if n, _ := fmt.Sscanf(line, "Target %d: %s", &tid, &name); n == 2 {
				tgtadm("--op", "delete", "--mode", "target", "--tid", strconv.Itoa(tid), "--force")
			}
		}
		run("tgtadm", "-C", tgtPort, "--op", "delete", "--mode", "system")
	}
	deadline := time.Now().Add(3 * time.Second * Slowdown())
	for {
		pids := findProcs(isOurTgtd)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			killAll(pids)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	os.Remove(tgtSocket())
	os.Remove(tgtSocket() + ".lock")
}

// isOurTgtd matches tgtd processes started with our control port.
func isOurTgtd(argv []string) bool {
	if len(argv) == 0 || filepath.Base(argv[0]) != "tgtd" {
		return false
	}
	for i, a := range argv {
		if (a == "-C" || a == "--control-port") && i+1 < len(argv) && argv[i+1] == tgtPort {
			return true
		}
	}
	return false
}
