package discover

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Probe is one kind of target software that discovery source auto looks
// for: Present says whether it runs on the host (a cheap look at a file,
// no process), Read what it exports.
type Probe struct {
	Name    string // "tgt", "lio", "nvmet": the discovery source names
	Present func() bool
	Read    func() ([]Target, error)
	// Absent says what was looked for when Present is false, for the
	// message that nothing was found.
	Absent string
}

// ReadAll reads every present probe's targets and merges them, so one
// snapshot holds the pools of each target software on the host; found
// names the probes that were present, in probes' order. A present probe
// that fails fails the whole read: mapping from the others alone would
// lose its pools for a round (their resources unmapped, their throttles
// released) on a transient error. None present is an error that says
// what was looked for.
func ReadAll(probes []Probe) (targets []Target, found []string, err error) {
	var absent []string
	for _, p := range probes {
		if !p.Present() {
			absent = append(absent, p.Absent)
			continue
		}
		found = append(found, p.Name)
		t, err := p.Read()
		if err != nil {
			return nil, found, fmt.Errorf("%s: %w", p.Name, err)
		}
		targets = append(targets, t...)
	}
	if len(found) == 0 {
		return nil, nil, errors.New("no target software found: " + strings.Join(absent, "; "))
	}
	return targets, found, nil
}

// TgtSocketDir is where tgtd puts its control socket, socket.N for -C N
// (tgt's usr/tgtadm.h, TGT_IPC_NAMESPACE).
const TgtSocketDir = "/var/run/tgtd"

// ConfigfsRoot is where configfs is mounted: LIO under target/, the
// kernel NVMe target under nvmet/.
const ConfigfsRoot = "/sys/kernel/config"

// NVMeHosts lists the connections to an NVMe target's ports (nvmet's
// configfs does not say who is connected): the caller's socket table,
// and what it saw on the wire.
type NVMeHosts func(NVMet) ([]NVMeConn, error)

// AutoProbes are the target software auto finds on this host: tgt (its
// control socket for controlPort exists; tgtadm must then answer on it),
// LIO (configfs's target/iscsi) and the kernel NVMe target (configfs's
// nvmet/subsystems, its hosts from hosts; nil: none), configfs being
// mounted at configfs ("": ConfigfsRoot).
func AutoProbes(controlPort int, configfs string, hosts NVMeHosts) []Probe {
	configfs = cmp.Or(configfs, ConfigfsRoot)
	sock := filepath.Join(TgtSocketDir, "socket."+strconv.Itoa(controlPort))
	lio, nvmet := filepath.Join(configfs, "target"), filepath.Join(configfs, "nvmet")
	return []Probe{
		{Name: "tgt", Present: func() bool { return exists(sock) }, Read: func() ([]Target, error) { return Tgt(controlPort) },
			Absent: "tgt: no control socket " + sock},
		{Name: "lio", Present: func() bool { return isDir(filepath.Join(lio, "iscsi")) }, Read: func() ([]Target, error) { return ReadLIO(lio) },
			Absent: "lio: no " + filepath.Join(lio, "iscsi")},
		{Name: "nvmet", Present: func() bool { return isDir(filepath.Join(nvmet, "subsystems")) }, Read: func() ([]Target, error) { return NVMetTargets(nvmet, hosts) },
			Absent: "nvmet: no " + filepath.Join(nvmet, "subsystems")},
	}
}

// NVMetTargets are the kernel NVMe target's subsystems under root as
// targets, with the hosts hosts finds connected (nil: none).
func NVMetTargets(root string, hosts NVMeHosts) ([]Target, error) {
	n, err := ReadNVMet(root)
	if err != nil || hosts == nil {
		return n.Subsystems, err
	}
	conns, err := hosts(n)
	if err != nil {
		return nil, fmt.Errorf("nvmet hosts: %w", err)
	}
	return n.WithHosts(conns), nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
