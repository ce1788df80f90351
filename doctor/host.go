package doctor

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/discover"
)

// Host is where the checks look. System() is this machine; tests point
// Root at a tree of files captured from a real one and Exec at the output
// those programs gave there.
type Host struct {
	// Root is prefixed to every absolute path read (/proc, /sys, /boot,
	// /lib/modules, /run): "/" on the machine itself.
	Root string
	// Exec runs a program that only prints (never a shell) and returns
	// its standard output.
	Exec func(name string, args ...string) ([]byte, error)
	// LookPath finds a program as exec.LookPath does.
	LookPath func(name string) (string, error)
	// Links lists the network interfaces with their addresses.
	Links func() ([]Link, error)
	// DialUnix connects to a unix socket and hangs up: whether an agent
	// already serves the control socket.
	DialUnix func(path string) error
	// Stat is discover.Resolver's stat of a backing store; nil is stat(2).
	// Tests give one, as a captured tree holds no device nodes.
	Stat func(path string) (discover.FileDev, error)
}

// Link is one network interface as the interfaces check shows it.
type Link struct {
	net.Interface
	Addrs []string
}

// System is this machine, as the agent would see it from doctor's own
// network namespace.
func System() Host {
	return Host{Root: "/", Exec: runPrinting, LookPath: exec.LookPath, Links: systemLinks, DialUnix: dialUnix}
}

// path is p (absolute) under Root.
func (h Host) path(p string) string { return filepath.Join(h.Root, p) }

func (h Host) read(p string) ([]byte, error) { return os.ReadFile(h.path(p)) }

func (h Host) exists(p string) bool {
	_, err := os.Stat(h.path(p))
	return err == nil
}

// has reports whether a program is installed.
func (h Host) has(name string) bool {
	_, err := h.LookPath(name)
	return err == nil
}

// runPrinting runs a program directly (no shell) with a timeout, so a hung
// tgtd or a stuck xtables lock cannot stall the preflight.
func runPrinting(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := bytes.TrimSpace(errb.Bytes())
		if len(msg) == 0 {
			return out.Bytes(), err
		}
		return out.Bytes(), fmt.Errorf("%v: %s", err, msg)
	}
	return out.Bytes(), nil
}

func systemLinks() ([]Link, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []Link
	for _, i := range ifs {
		l := Link{Interface: i}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			l.Addrs = append(l.Addrs, a.String())
		}
		out = append(out, l)
	}
	return out, nil
}

func dialUnix(path string) error {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}
