package lab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The kernel initiator (`lab up --initiator kernel`): open-iscsi's iscsid
// and the kernel's iscsi_tcp, with fio (libaio, O_DIRECT) on each
// session's block device.
//
// The kernel's iSCSI transport netlink (NETLINK_ISCSI) exists only in the
// initial network namespace, so iscsid cannot run inside b2..b5. What
// the lab does instead: one iscsid in the initial namespace, and per
// client a veth "sq-bX" there, on the lab's bridge with the client's
// address (10.99.0.X), and an iscsiadm iface bound to it
// (iface.net_ifacename: SO_BINDTODEVICE, which makes the kernel pick
// that interface's address as the source; iface.ipaddress is refused for
// iscsi_tcp). The target sees each client at its own address, as with
// libiscsi. The namespaces b2..b5 still exist and hold each client's fio
// (block devices are not namespaced), but its TCP is the initial
// namespace's: per-client initiator-side TCP counters are not separable.
// Only in the stock-kernel guest, whose initial namespace is the lab's
// alone.

// KernelClientDev is the initial namespace's interface of client host.
func KernelClientDev(host string) string { return "sq-" + host }

// ClientTCPNS is the network namespace whose TCP stack carries client
// host's iSCSI connections, where their TCP counters are read: the
// host's own with libiscsi (fio's engine in it), the initial one ("",
// all clients' sessions together) with the kernel initiator, as tcpByNS
// counts a phase. A nil state is the default lab's (libiscsi).
func (s *State) ClientTCPNS(host string) string {
	if s != nil && s.Options.iscsiKernel() {
		return ""
	}
	return host
}

var (
	iscsidConf    = filepath.Join(StateDir, "iscsid.conf")
	initiatorFile = filepath.Join(StateDir, "initiatorname.iscsi")
	iscsidPIDFile = filepath.Join(StateDir, "iscsid.pid")
	// IscsidLog is iscsid's output (outlives Down, like ServeLog).
	IscsidLog = "/run/sanqos-lab-iscsid.log"
)

// kernelModules are the modules the kernel initiators (iSCSI, NVMe/TCP),
// LIO and nvmet load, in
// unload order (users before what they use); Down unloads those of them
// the record says `lab up` loaded.
var kernelModules = []string{"nvme_tcp", "nvme_fabrics", "nvme_core", "nvmet_tcp", "nvmet",
	"t10_pi", "crc64_rocksoft", "crc64_rocksoft_generic", "crc64", "crc_t10dif", "crct10dif_pclmul", "crct10dif_generic", "crct10dif_common",
	"iscsi_tcp", "libiscsi_tcp", "libiscsi", "scsi_transport_iscsi",
	"iscsi_target_mod", "target_core_iblock", "target_core_file", "target_core_pscsi", "target_core_user", "uio",
	"target_core_mod", "sd_mod", "scsi_mod", "scsi_common", "configfs"}

// checkKernelInitiator refuses the kernel initiator where it would take
// over this machine's initial network namespace and iSCSI state: it runs
// in the stock-kernel guest only.
func checkKernelInitiator(o Options) error {
	if GuestAccel() == "" {
		return errors.New("--initiator kernel runs in the stock-kernel guest only (sanqos-lab lab up --kernel debian --initiator kernel): iscsid needs the initial network namespace, and the NVMe/TCP host modules, which this machine lacks")
	}
	if !o.iscsiKernel() {
		return nil
	}
	for _, c := range []string{"iscsid", "iscsiadm"} {
		if _, err := Exec("sh", "-c", "command -v "+c); err != nil {
			return fmt.Errorf("%s missing (install: apt-get install open-iscsi, scripts/setup.sh)", c)
		}
	}
	return nil
}

// setupKernelClient gives host a veth in the initial namespace, on the
// bridge, with the host's address. The host's namespace is left without
// a network device.
func setupKernelClient(host string) error {
	dev, port := KernelClientDev(host), "p-"+host
	steps := [][]string{
		{"-n", SwitchNS, "link", "add", port, "type", "veth", "peer", "name", dev, "netns", "1"},
		{"-n", SwitchNS, "link", "set", port, "master", bridgeName, "up"},
		{"addr", "add", HostAddr(host).String() + "/24", "dev", dev},
		{"link", "set", dev, "up"},
		{"-n", host, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if _, err := Exec("ip", s...); err != nil {
			return err
		}
	}
	// Four interfaces on one subnet in one namespace: each answers ARP
	// only for its own address (arp_ignore 1) and asks with it
	// (arp_announce 2), so the target sends each client's packets to the
	// interface its socket is bound to (a socket bound to a device takes
	// no packet that came in on another).
	for k, v := range map[string]string{"arp_ignore": "1", "arp_announce": "2", "rp_filter": "0"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/sys/net/ipv4/conf/%s/%s", dev, k), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// kernelClientDevs lists the lab's client interfaces in this namespace.
func kernelClientDevs() []string {
	var out []string
	for _, h := range Hosts {
		if _, err := os.Stat("/sys/class/net/" + KernelClientDev(h)); err == nil {
			out = append(out, KernelClientDev(h))
		}
	}
	return out
}

// prepareKernelInitiator loads iscsi_tcp (recording what it loaded) and
// writes iscsid's configuration into StateDir: the supervisor starts
// iscsid with it.
func prepareKernelInitiator() error {
	before := loadedModules()
	// sd_mod too: the guest has no udev to load it for the first disk.
	_, err := Exec("modprobe", "-a", "iscsi_tcp", "sd_mod")
	recordModules(before, kernelModules)
	if err != nil {
		return err
	}
	// iscsiadm locks its records in /run/lock/iscsi; the guest's /run is
	// a fresh tmpfs.
	if err := os.MkdirAll("/run/lock", 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(initiatorFile, []byte("InitiatorName="+IQNPrefix+"iscsid\n"), 0o600); err != nil {
		return err
	}
	// iscsid's own settings (the node records' come from iscsiadm:
	// nodeSettings).
	return os.WriteFile(iscsidConf, []byte("# sanqos lab: iscsid defaults\n"), 0o600)
}

// iscsidCommand is the lab's iscsid, in the foreground (its supervisor
// waits for it), labelled by its configuration's path.
func iscsidCommand() []string {
	return []string{"iscsid", "-f", "-c", iscsidConf, "-i", initiatorFile}
}

func isOurIscsid(argv []string) bool {
	if len(argv) == 0 || filepath.Base(argv[0]) != "iscsid" {
		return false
	}
	for i, a := range argv {
		if a == "-c" && i+1 < len(argv) && argv[i+1] == iscsidConf {
			return true
		}
	}
	return false
}

func iscsiadm(args ...string) (string, error) { return Exec("iscsiadm", args...) }

// iscsidReady reports whether iscsid answers iscsiadm (exit 21: no
// sessions, which is an answer).
func iscsidReady() bool {
	err := exec.Command("iscsiadm", "-m", "session").Run()
	var ee *exec.ExitError
	return err == nil || errors.As(err, &ee) && ee.ExitCode() == 21
}

// loginKernel logs every client into its LUNs' targets through its own
// iface and records each LUN's block device.
func loginKernel(s *State, log io.Writer) error {
	if err := WaitFor("iscsid", 10*time.Second, iscsidReady); err != nil {
		return err
	}
	portal := fmt.Sprintf("%s:%d", TargetAddr, ISCSIPort)
	for _, h := range Hosts {
		dev := KernelClientDev(h)
		if _, err := iscsiadm("-m", "iface", "-I", dev, "-o", "new"); err != nil {
			return err
		}
		for _, kv := range [][2]string{{"iface.net_ifacename", dev}, {"iface.initiatorname", IQNPrefix + h}, {"iface.transport_name", "tcp"}} {
			if _, err := iscsiadm("-m", "iface", "-I", dev, "-o", "update", "-n", kv[0], "-v", kv[1]); err != nil {
				return err
			}
		}
	}
	for _, r := range s.targets() {
		for _, l := range r.LUNs {
			dev := KernelClientDev(l.Host)
			if _, err := iscsiadm("-m", "node", "-o", "new", "-T", r.IQN, "-p", portal+","+strconv.Itoa(lioTag), "-I", dev); err != nil {
				return err
			}
			for _, kv := range nodeSettings {
				if _, err := iscsiadm("-m", "node", "-T", r.IQN, "-p", portal, "-I", dev, "-o", "update", "-n", kv[0], "-v", kv[1]); err != nil {
					return err
				}
			}
			if _, err := iscsiadm("-m", "node", "-T", r.IQN, "-p", portal, "-I", dev, "--login"); err != nil {
				return err
			}
		}
	}
	var missing []string
	err := WaitFor("the kernel initiator's block devices", 10*time.Second, func() bool {
		devs := kernelDevices()
		missing = missing[:0]
		for _, r := range s.targets() {
			for _, l := range r.LUNs {
				if devs[kernelKey{r.IQN, IQNPrefix + l.Host, l.Number}] == "" {
					missing = append(missing, r.Name+"/"+l.Host)
				}
			}
		}
		return len(missing) == 0
	})
	if err != nil {
		return fmt.Errorf("%w: no block device for %s", err, strings.Join(missing, ", "))
	}
	devs := kernelDevices()
	for _, r := range s.targetRefs() {
		for j := range r.LUNs {
			l := &r.LUNs[j]
			l.Device = devs[kernelKey{r.IQN, IQNPrefix + l.Host, l.Number}]
			l.URL = "/dev/" + l.Device
			// A TCG guest is slow; SCSI's 30 s command timeout would abort
			// commands queued behind a throttled writer's.
			os.WriteFile("/sys/block/"+l.Device+"/device/timeout", []byte("180"), 0o644)
		}
	}
	if log != nil {
		var parts []string
		for _, r := range s.targets() {
			for _, l := range r.LUNs {
				parts = append(parts, fmt.Sprintf("%s/%s→%s", r.Name, l.Host, l.Device))
			}
		}
		fmt.Fprintf(log, "kernel initiator: %d sessions (%s)\n", len(parts), strings.Join(parts, " "))
	}
	return nil
}

// nodeSettings are the lab's session settings beyond open-iscsi's
// defaults. Nop-outs off: a TCG guest under load can leave one
// unanswered for the default 5 s and the session would be dropped and
// recovered mid-experiment.
var nodeSettings = [][2]string{
	{"node.conn[0].timeo.noop_out_interval", "0"},
	{"node.conn[0].timeo.noop_out_timeout", "0"},
}

type kernelKey struct {
	target, initiator string
	lun               int
}

// KernelSession is one of the kernel initiator's sessions, from sysfs.
type KernelSession struct {
	ID        int    // N of /sys/class/iscsi_session/sessionN
	Target    string // targetname
	Initiator string // initiatorname (the iface's)
	Iface     string // ifacename
	State     string // LOGGED_IN, FAILED, FREE
	Devices   map[int]string
}

// KernelSessions reads the kernel initiator's sessions from
// /sys/class/iscsi_session and their disks from the SCSI devices under
// each session (H:C:T:L/block/sdX).
func KernelSessions() []KernelSession {
	dirs, _ := filepath.Glob("/sys/class/iscsi_session/session*")
	var out []KernelSession
	for _, d := range dirs {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "session"))
		if err != nil {
			continue
		}
		read := func(f string) string {
			b, _ := os.ReadFile(filepath.Join(d, f))
			return strings.TrimSpace(string(b))
		}
		ks := KernelSession{ID: id, Target: read("targetname"), Initiator: read("initiatorname"), Iface: read("ifacename"), State: read("state"), Devices: map[int]string{}}
		blocks, _ := filepath.Glob(filepath.Join(d, "device", "target*", "*", "block", "*"))
		for _, b := range blocks {
			hctl := filepath.Base(filepath.Dir(filepath.Dir(b)))
			f := strings.Split(hctl, ":")
			if len(f) != 4 {
				continue
			}
			if lun, err := strconv.Atoi(f[3]); err == nil {
				ks.Devices[lun] = filepath.Base(b)
			}
		}
		out = append(out, ks)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out
}

func kernelDevices() map[kernelKey]string {
	m := map[kernelKey]string{}
	for _, ks := range KernelSessions() {
		for lun, dev := range ks.Devices {
			m[kernelKey{ks.Target, ks.Initiator, lun}] = dev
		}
	}
	return m
}

// ourKernelSessions are the sessions to the lab's targets.
func ourKernelSessions() []KernelSession {
	var out []KernelSession
	for _, ks := range KernelSessions() {
		if strings.HasPrefix(ks.Target, IQNPrefix) {
			out = append(out, ks)
		}
	}
	return out
}

// kernelHealth lists what is wrong with the kernel initiator's side.
func kernelHealth(s *State) []string {
	var p []string
	if len(FindProcs(isOurIscsid)) == 0 {
		p = append(p, "iscsid not running")
	}
	up := map[kernelKey]string{}
	for _, ks := range ourKernelSessions() {
		if ks.State != "LOGGED_IN" {
			continue
		}
		for lun, dev := range ks.Devices {
			up[kernelKey{ks.Target, ks.Initiator, lun}] = dev
		}
	}
	for _, r := range s.targets() {
		for _, l := range r.LUNs {
			if d := up[kernelKey{r.IQN, IQNPrefix + l.Host, l.Number}]; d == "" || d != l.Device {
				p = append(p, fmt.Sprintf("no session of %s to %s (device %s)", l.Host, r.Name, l.Device))
			}
		}
	}
	return p
}

// stopKernelInitiator logs the lab's sessions out, deletes its node and
// iface records and stops its iscsid (the network goes with the lab's). With sessions left and no iscsid
// (it died), one is started to log them out.
func stopKernelInitiator() []error {
	var errs []error
	started := false
	if len(ourKernelSessions()) > 0 && len(FindProcs(isOurIscsid)) == 0 {
		if _, err := os.Stat(iscsidConf); err == nil {
			if _, err := Exec("iscsid", "-c", iscsidConf, "-i", initiatorFile, "-p", iscsidPIDFile); err == nil { // daemonizes
				started = true
				WaitFor("iscsid", 10*time.Second, iscsidReady)
			}
		}
	}
	for _, ks := range ourKernelSessions() {
		if _, err := iscsiadm("-m", "session", "-r", strconv.Itoa(ks.ID), "-u"); err != nil {
			errs = append(errs, err)
		}
	}
	if len(FindProcs(isOurIscsid)) > 0 || started {
		nodes, _ := iscsiadm("-m", "node")
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[1], IQNPrefix) {
				iscsiadm("-m", "node", "-o", "delete", "-T", f[1])
			}
		}
	}
	for _, h := range Hosts {
		if _, err := os.Stat(filepath.Join("/etc/iscsi/ifaces", KernelClientDev(h))); err == nil {
			iscsiadm("-m", "iface", "-I", KernelClientDev(h), "-o", "delete")
		}
	}
	pids := FindProcs(isOurIscsid)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	WaitFor("iscsid exit", 5*time.Second, func() bool { return len(FindProcs(isOurIscsid)) == 0 })
	KillAll(FindProcs(isOurIscsid))
	return errs
}

// kernelLeftovers lists what the kernel initiator left.
func kernelLeftovers() []string {
	var l []string
	for _, ks := range ourKernelSessions() {
		l = append(l, fmt.Sprintf("iscsi session%d (%s via %s)", ks.ID, ks.Target, ks.Iface))
	}
	if len(FindProcs(isOurIscsid)) > 0 {
		l = append(l, "iscsid")
	}
	for _, d := range kernelClientDevs() {
		l = append(l, "link "+d)
	}
	return l
}

// superviseIscsid runs the lab's iscsid in the foreground and restarts it
// whenever it exits unasked (the kernel keeps the sessions meanwhile; a
// new iscsid takes them over).
func superviseIscsid(log *slog.Logger, quit <-chan struct{}) {
	backoff := 200 * time.Millisecond
	for {
		argv := iscsidCommand()
		cmd := exec.Command(argv[0], argv[1:]...)
		if f, err := os.OpenFile(IscsidLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			cmd.Stdout, cmd.Stderr = f, f
			defer f.Close()
		}
		if err := cmd.Start(); err != nil {
			log.Error("iscsid start", "err", err)
			return
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-quit:
			<-done
			return
		case err := <-done:
			log.Warn("iscsid exited; restarting", "err", err, "after", backoff)
			select {
			case <-quit:
				return
			case <-time.After(backoff):
			}
		}
	}
}

// superviseWhat says what the supervisor runs for o.
func superviseWhat(o Options) string {
	what := "FUSE disk model"
	if o.RealDisk {
		what = "no disk model"
	}
	if o.TargetKind() == TargetTgt {
		what += ", tgtd in " + TargetNS
	}
	if o.iscsiKernel() {
		what += ", iscsid"
	}
	return what
}

// withISCSIFields puts "target" and "initiator" (tgt or lio; libiscsi or
// kernel) first in an indented JSON object, so every summary says which
// iSCSI stack produced it.
func withISCSIFields(b []byte, o Options) []byte {
	if !bytes.HasPrefix(b, []byte("{")) {
		return b
	}
	head := fmt.Sprintf("{\n  %q: %q,\n  %q: %q", "target", o.TargetKind(), "initiator", o.InitiatorKind())
	rest := bytes.TrimSpace(b[1:])
	if !bytes.Equal(rest, []byte("}")) {
		head += ","
	}
	return append([]byte(head+"\n  "), rest...)
}
