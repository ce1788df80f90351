package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Exec runs a program directly (never through a shell) and returns its
// stdout; the error carries stderr so failures say what the tool said.
// No program the lab runs this way may hang it: one still running after
// Limits.Exec is killed and fails.
func Exec(name string, args ...string) (string, error) {
	return runStdin(nil, name, args...)
}

// Limits bound the lab's commands (issue 56: no lab command hangs), each
// stretched by Slowdown in a TCG guest: Up and Down the whole of `lab up`
// and `lab down` (Watchdog; here up takes ~3 s, down ~1 s), Lock the wait
// for another lab command's lab lock, Tgtadm each tgtadm call, Exec every
// other program the lab runs (ip, losetup, umount: short administrative
// commands), Fio how long a phase's fio may run past the phase's end
// (`lab run` is as long as its phases). LimitsEnv ("down=2s,tgtadm=300ms")
// shortens them for a test that wants to see a command give up; a
// supervisor inherits it.
var Limits = struct{ Up, Down, Lock, Tgtadm, Exec, Fio time.Duration }{
	Up: 5 * time.Minute, Down: 3 * time.Minute, Lock: 60 * time.Second, Tgtadm: 10 * time.Second, Exec: 60 * time.Second, Fio: 60 * time.Second,
}

// LimitsEnv overrides Limits: comma-separated name=duration, names up,
// down, lock, tgtadm, exec, fio.
const LimitsEnv = "SANQOS_LAB_LIMITS"

func init() {
	named := map[string]*time.Duration{"up": &Limits.Up, "down": &Limits.Down, "lock": &Limits.Lock, "tgtadm": &Limits.Tgtadm, "exec": &Limits.Exec, "fio": &Limits.Fio}
	for _, kv := range strings.Split(os.Getenv(LimitsEnv), ",") {
		k, v, _ := strings.Cut(kv, "=")
		if d, err := time.ParseDuration(v); err == nil && named[k] != nil {
			*named[k] = d
		}
	}
}

// runStdin is run with stdin read from in (nil: none).
func runStdin(in io.Reader, name string, args ...string) (string, error) {
	return runTimeout(Limits.Exec, in, name, args...)
}

// runTimeout is runStdin with its own time limit.
func runTimeout(limit time.Duration, in io.Reader, name string, args ...string) (string, error) {
	limit *= Slowdown()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// A killed program's own children may hold its output open.
	cmd.WaitDelay = time.Second
	cmd.Stdin = in
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("killed after %v (hung)", limit)
		}
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// InNS runs a program inside a named network namespace.
func InNS(ns, name string, args ...string) (string, error) {
	if ns == "" { // this, the initial, namespace
		return Exec(name, args...)
	}
	return Exec("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// writeInNS writes value to a file as seen from inside a network namespace
// (sysfs shows each namespace its own devices), through tee's stdin.
func writeInNS(ns, path, value string) error {
	if ns == "" { // this, the initial, namespace
		return os.WriteFile(path, []byte(value), 0o644)
	}
	_, err := runStdin(strings.NewReader(value), "ip", "netns", "exec", ns, "tee", path)
	return err
}

// Prereqs are the programs the lab needs, with the command installing them.
var Prereqs = []struct{ Cmd, Install string }{
	{"ip", "apt-get install iproute2"},
	{"tgtd", "apt-get install tgt"},
	{"tgtadm", "apt-get install tgt"},
	{"losetup", "apt-get install mount"},
	{"iptables", "apt-get install iptables"},
	{"ipset", "apt-get install ipset"},
	{"nstat", "apt-get install iproute2"},
	{"fio", "scripts/setup.sh (builds fio from Debian's source with --enable-libiscsi)"},
}

// CheckPrereqs names every missing program and how to install it, and
// checks that fio has the libiscsi engine.
func CheckPrereqs() error {
	var missing []string
	for _, p := range Prereqs {
		if _, err := exec.LookPath(p.Cmd); err != nil {
			missing = append(missing, fmt.Sprintf("%s (install: %s)", p.Cmd, p.Install))
		}
	}
	if len(missing) == 0 {
		out, _ := Exec("fio", "--enghelp")
		if !strings.Contains(out, "libiscsi") {
			missing = append(missing, "fio with the libiscsi engine (install: scripts/setup.sh)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s", strings.Join(missing, "; "))
	}
	return nil
}

// DialInNS dials a TCP address from inside a lab namespace; the
// connection keeps working from any goroutine once made.
func DialInNS(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}
