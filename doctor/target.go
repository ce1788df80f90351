package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/discover"
)

// tgtSocketDir is where tgtd puts its control socket, socket.N for -C N
// (tgt's usr/tgtadm.h, TGT_IPC_NAMESPACE).
const tgtSocketDir = "/var/run/tgtd"

// tgtPorts lists the control ports of the tgtd instances whose sockets
// exist. The directory is shared by every network namespace, so the lab's
// tgtd (in namespace bm, -C 31) shows up here too. Any entry named
// socket.N counts (not only sockets), so a captured tree can stand in.
func (h Host) tgtPorts() []int {
	ents, err := os.ReadDir(h.path(tgtSocketDir))
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "socket.")
		if p, err := strconv.Atoi(n); ok && err == nil && !e.IsDir() {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// lioRoot is LIO's configfs root: the config's discovery root (for
// source auto, configfs's mount point: LIO's is its target/), or the
// kernel's mount point.
func (e *Env) lioRoot() string { return e.configfsDir("lio", "target") }

// nvmetRoot is the kernel NVMe target's configfs root, found as lioRoot.
func (e *Env) nvmetRoot() string { return e.configfsDir("nvmet", "nvmet") }

func (e *Env) configfsDir(source, dir string) string {
	if d := e.Config.Discovery; e.configured() && d.Root != "" {
		switch d.Source {
		case source:
			return d.Root
		case "auto":
			return filepath.Join(d.Root, dir)
		}
	}
	return e.Host.path(filepath.Join(discover.ConfigfsRoot, dir))
}

// ietRoot is IET's /proc directory, or the config's discovery root.
func (e *Env) ietRoot() string {
	if e.configured() && e.Config.Discovery.Source == "iet" && e.Config.Discovery.Root != "" {
		return e.Config.Discovery.Root
	}
	return e.Host.path("/proc/net/iet")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// found lists the target software present, by discovery source name.
func (e *Env) found() []string {
	var out []string
	if e.Host.has("tgtadm") && len(e.Host.tgtPorts()) > 0 {
		out = append(out, "tgt")
	}
	if isDir(filepath.Join(e.lioRoot(), "iscsi")) {
		out = append(out, "lio")
	}
	if isDir(filepath.Join(e.nvmetRoot(), "subsystems")) {
		out = append(out, "nvmet")
	}
	if isDir(e.ietRoot()) {
		out = append(out, "iet")
	}
	return out
}

// autoFound is what discovery source auto would find here, as the agent
// looks (discover.AutoProbes): tgtd's control socket for the config's
// tgt_control_port, LIO's and nvmet's configfs directories.
func (e *Env) autoFound() []string {
	var out []string
	if slices.Contains(e.Host.tgtPorts(), e.Config.Discovery.TgtControlPort) {
		out = append(out, "tgt")
	}
	if isDir(filepath.Join(e.lioRoot(), "iscsi")) {
		out = append(out, "lio")
	}
	if isDir(filepath.Join(e.nvmetRoot(), "subsystems")) {
		out = append(out, "nvmet")
	}
	return out
}

// autoAbsent says what auto looked for and did not find.
func (e *Env) autoAbsent() string {
	s := fmt.Sprintf("tgt: no control socket %s/socket.%d", tgtSocketDir, e.Config.Discovery.TgtControlPort)
	if ports := e.Host.tgtPorts(); len(ports) > 0 {
		s += fmt.Sprintf(" (tgtd runs with -C %d: set discovery.tgt_control_port: %d)", ports[0], ports[0])
	}
	return s + "; lio: no " + filepath.Join(e.lioRoot(), "iscsi") + "; nvmet: no " + filepath.Join(e.nvmetRoot(), "subsystems")
}

func (e *Env) targetCheck() Result {
	r := Result{Status: OK, Detail: []string{e.tgtLine(), e.lioLine(), e.nvmetLine(), e.ietLine()}}
	found := e.found()
	if !e.configured() {
		r.Summary = "found: " + orNone(strings.Join(found, ", ")) + " (the agent discovers nothing without --config)"
		return r
	}
	src := e.Config.Discovery.Source
	switch {
	case e.Config.Mode == "bridge":
		r.Summary = "bridge mode: no target to ask; consumers come from the wire on " + e.Config.CaptureInterface
	case src == "static":
		r.Summary = "discovery static: the config names each resource's devices and consumers"
	case src == "auto":
		if auto := e.autoFound(); len(auto) > 0 {
			r.Summary = "discovery auto: found " + strings.Join(auto, ", ")
		} else {
			r.Status, r.Summary = Warn, "discovery auto: no target software found ("+e.autoAbsent()+")"
		}
	case src == "iet":
		// cmd/sanqos' newDiscoverer refuses it: the parser exists, the
		// wiring does not.
		r.Status = Fail
		r.Summary = `discovery source "iet" is not wired yet: the agent would refuse to start (use static, or tgt/lio)`
	case src == "tgt" && !e.Host.has("tgtadm"):
		r.Status, r.Summary = Warn, "discovery tgt, but tgtadm is not installed"
	case src == "tgt" && !slices.Contains(e.Host.tgtPorts(), e.Config.Discovery.TgtControlPort):
		r.Status = Warn
		r.Summary = fmt.Sprintf("discovery tgt: no tgtd control socket %s/socket.%d (tgtd not running, or another -C)", tgtSocketDir, e.Config.Discovery.TgtControlPort)
		if ports := e.Host.tgtPorts(); len(ports) > 0 {
			r.Summary += fmt.Sprintf("; tgtd runs with -C %d: set discovery.tgt_control_port: %d", ports[0], ports[0])
		}
	case !slices.Contains(found, src):
		r.Status, r.Summary = Warn, "discovery "+src+": not found on this host"
	default:
		r.Summary = "discovery " + src + ": found"
	}
	if r.Status == Warn {
		r.Detail = append(r.Detail, "the agent would start and retry discovery every interval, controlling nothing until it works")
	}
	return r
}

func (e *Env) tgtLine() string {
	if !e.Host.has("tgtadm") {
		return "tgt: tgtadm not installed"
	}
	ports := e.Host.tgtPorts()
	if len(ports) == 0 {
		return "tgt: tgtadm installed; no tgtd control socket in " + tgtSocketDir + " (tgtd not running)"
	}
	var s []string
	for _, p := range ports {
		s = append(s, fmt.Sprintf("socket.%d (tgtadm -C %d)", p, p))
	}
	return "tgt: tgtd control sockets " + strings.Join(s, ", ")
}

func (e *Env) lioLine() string {
	k := e.kernelFacts()
	switch {
	case isDir(filepath.Join(e.lioRoot(), "iscsi")):
		return "LIO: iSCSI fabric in " + e.lioRoot()
	case k.known("lio") && !k.has("lio"):
		return "LIO: kernel has no LIO iSCSI target (CONFIG_ISCSI_TARGET)"
	case !isDir(filepath.Dir(e.lioRoot())):
		return "LIO: configfs not mounted at " + filepath.Dir(e.lioRoot())
	}
	return "LIO: no iSCSI fabric in " + e.lioRoot() + " (iscsi_target_mod not loaded, or no target configured)"
}

func (e *Env) nvmetLine() string {
	if isDir(filepath.Join(e.nvmetRoot(), "subsystems")) {
		return "NVMe target: " + e.nvmetRoot()
	}
	return "NVMe target: no " + filepath.Join(e.nvmetRoot(), "subsystems") + " (nvmet not loaded, or configfs not mounted)"
}

func (e *Env) ietLine() string {
	if isDir(e.ietRoot()) {
		return "IET: " + e.ietRoot()
	}
	return "IET: no " + e.ietRoot()
}
