package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The kernel NVMe target over TCP (`lab up --target nvmet --initiator
// kernel`), configured through configfs as nvmetcli would, and the
// kernel's NVMe/TCP host connecting from each client's own namespace:
//
//	nvmet/subsystems/nqn.2026-11.lab:vg1          one subsystem per resource, any host
//	  namespaces/N/{device_path,enable}           one namespace per client, on its loop device
//	nvmet/ports/31/addr_*                         10.99.0.1:4420 (tcp, ipv4)
//	  subsystems/nqn.2026-11.lab:vg1 → …          linked from inside netns bm
//
// nvmet-tcp opens the port's listening socket when the first subsystem is
// linked to it, in the network namespace of the process linking it; the
// host's connect (a write to /dev/nvme-fabrics) opens its queues'
// sockets in the writer's namespace, so each client connects from its
// own namespace and address. A reconnect after an error runs from a
// kernel worker in the initial namespace, which has no route to the
// lab: a controller that loses its connection stays down until `lab up`
// connects it again (Health reports it).
//
// nvme_core is loaded with multipath off: all clients are one kernel,
// and with native multipath the namespaces of one subsystem reached by
// several hosts would merge into one device whose I/O takes any host's
// path. With it off each controller has its own nvme<ctrl>n<K>.
//
// Every configfs object, controller and module the lab makes is in its
// record before or as it is made; Down removes those and any other
// object with the lab's label (port id 31, NQN prefix).

// NVMePort is the NVMe/TCP service of the lab's target.
const NVMePort = 4420

// NQNPrefix starts the NQN of every lab subsystem and host.
const NQNPrefix = "nqn.2026-11.lab:"

// ConfigfsNVMet is nvmet's configfs root.
const ConfigfsNVMet = "/sys/kernel/config/nvmet"

const nvmetPortID = 31

// SubsystemNQN is resource r's subsystem.
func SubsystemNQN(r Resource) string { return NQNPrefix + r.Name }

// HostNQN is client host's NQN.
func HostNQN(host string) string { return NQNPrefix + host }

// hostID is host's NVMe host identifier: a UUID ending in the host's
// name (b2..b5 are hex), distinct per host as the target requires.
func hostID(host string) string {
	return "5a9c0000-0000-4000-8000-" + strings.Repeat("0", max(0, 12-len(host))) + host
}

func nvmetPortDir() string { return filepath.Join(ConfigfsNVMet, "ports", strconv.Itoa(nvmetPortID)) }

// configureNVMet loads the target and host modules (recording what it
// loaded), builds the subsystems, their namespaces and the port, and
// mounts the agent's view of configfs.
func configureNVMet(s *State, log io.Writer) error {
	before := loadedModules()
	defer recordModules(before, kernelModules)
	if !before["nvme_core"] {
		// Before anything pulls it in with multipath on.
		if _, err := Exec("modprobe", "nvme_core", "multipath=N"); err != nil {
			return fmt.Errorf("nvmet: %w", err)
		}
	}
	if b, _ := os.ReadFile("/sys/module/nvme_core/parameters/multipath"); strings.TrimSpace(string(b)) == "Y" {
		return errors.New("nvmet: nvme_core is loaded with multipath=Y: the clients' controllers of one subsystem would share one device; unload nvme_core first")
	}
	if _, err := Exec("modprobe", "-a", "nvmet_tcp", "nvme_tcp"); err != nil {
		return fmt.Errorf("nvmet: %w", err)
	}
	// configfs is a module on the stock kernel: mounted only after
	// nvmet loaded it.
	if err := mountConfigfs(); err != nil {
		return fmt.Errorf("nvmet: %w", err)
	}
	for _, r := range s.targets() {
		if err := nvmetSubsystem(r); err != nil {
			return fmt.Errorf("nvmet subsystem %s: %w", SubsystemNQN(r), err)
		}
	}
	port := nvmetPortDir()
	if err := recordCfg(port); err != nil {
		return err
	}
	for k, v := range map[string]string{"addr_trtype": "tcp", "addr_adrfam": "ipv4", "addr_traddr": TargetAddr.String(), "addr_trsvcid": strconv.Itoa(NVMePort)} {
		if err := writeAttr(filepath.Join(port, k), v); err != nil {
			return err
		}
	}
	// The port listens once a subsystem is linked to it, in the linking
	// thread's network namespace: bm's.
	err := inNetns(TargetNS, func() error {
		for _, r := range s.targets() {
			link := filepath.Join(port, "subsystems", SubsystemNQN(r))
			if err := record("configfs", link); err != nil {
				return err
			}
			if err := symlinkCfg(filepath.Join(ConfigfsNVMet, "subsystems", SubsystemNQN(r)), link); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "nvmet: %d subsystems, port %s:%d in netns %s\n", len(s.targets()), TargetAddr, NVMePort, TargetNS)
	return mountAgentConfigfs()
}

// recordCfg records a configfs directory, then makes it.
func recordCfg(dir string) error {
	if err := record("configfs", dir); err != nil {
		return err
	}
	return mkdirCfg(dir)
}

func nvmetSubsystem(r Resource) error {
	sub := filepath.Join(ConfigfsNVMet, "subsystems", SubsystemNQN(r))
	if err := recordCfg(sub); err != nil {
		return err
	}
	if err := writeAttr(filepath.Join(sub, "attr_allow_any_host"), "1"); err != nil {
		return err
	}
	for _, l := range r.LUNs {
		ns := filepath.Join(sub, "namespaces", strconv.Itoa(l.Number))
		if err := recordCfg(ns); err != nil {
			return err
		}
		if err := writeAttr(filepath.Join(ns, "device_path"), l.Backing); err != nil {
			return err
		}
		// A file (the RAM LUN, on tmpfs) takes no O_DIRECT: nvmet's file
		// backend then refuses to enable it.
		if !isBlockDev(l.Backing) {
			if err := writeAttr(filepath.Join(ns, "buffered_io"), "1"); err != nil {
				return err
			}
		}
		if err := writeAttr(filepath.Join(ns, "enable"), "1"); err != nil {
			return err
		}
	}
	return nil
}

// nvmetReady reports whether the lab's port exports every subsystem.
func nvmetReady(s *State) bool {
	for _, r := range s.targets() {
		if _, err := os.Lstat(filepath.Join(nvmetPortDir(), "subsystems", SubsystemNQN(r))); err != nil {
			return false
		}
	}
	return true
}

// ConnectNVMe connects host, from its namespace, to subsystem nqn on the
// lab's port with nrIO I/O queues (0: the kernel's default, one per CPU)
// and returns the controller ("nvme3"), recorded as the lab's.
func ConnectNVMe(host, nqn string, nrIO int) (string, error) {
	opts := fmt.Sprintf("nqn=%s,transport=tcp,traddr=%s,trsvcid=%d,hostnqn=%s,hostid=%s,keep_alive_tmo=30",
		nqn, TargetAddr, NVMePort, HostNQN(host), hostID(host))
	if nrIO > 0 {
		opts += ",nr_io_queues=" + strconv.Itoa(nrIO)
	}
	var reply string
	err := inNetns(host, func() error {
		f, err := os.OpenFile("/dev/nvme-fabrics", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteString(opts); err != nil {
			return err
		}
		b := make([]byte, 128)
		n, err := f.Read(b)
		reply = string(b[:n])
		return err
	})
	if err != nil {
		return "", fmt.Errorf("nvme connect %s to %s: %w", host, nqn, err)
	}
	// "instance=3,cntlid=1"
	var inst, cntlid int
	if _, err := fmt.Sscanf(strings.TrimSpace(reply), "instance=%d,cntlid=%d", &inst, &cntlid); err != nil {
		return "", fmt.Errorf("nvme connect %s to %s: reply %q", host, nqn, reply)
	}
	ctrl := "nvme" + strconv.Itoa(inst)
	return ctrl, record("nvme-ctrl", ctrl, nqn, HostNQN(host))
}

// NVMeCtrl is one of the kernel host's fabrics controllers, from sysfs.
type NVMeCtrl struct {
	Name, SubNQN, HostNQN, State, Address string
	// Disks maps NSID to the block device of that namespace.
	Disks map[int]string
}

// NVMeCtrls reads the host's controllers from /sys/class/nvme.
func NVMeCtrls() []NVMeCtrl {
	dirs, _ := filepath.Glob("/sys/class/nvme/nvme*")
	var out []NVMeCtrl
	for _, d := range dirs {
		read := func(f string) string {
			b, _ := os.ReadFile(filepath.Join(d, f))
			return strings.TrimSpace(string(b))
		}
		c := NVMeCtrl{Name: filepath.Base(d), SubNQN: read("subsysnqn"), HostNQN: read("hostnqn"), State: read("state"), Address: read("address"), Disks: map[int]string{}}
		disks, _ := filepath.Glob(filepath.Join(d, c.Name+"n*"))
		for _, k := range disks {
			b, _ := os.ReadFile(filepath.Join(k, "nsid"))
			if nsid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				c.Disks[nsid] = filepath.Base(k)
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// ourNVMeCtrls are the controllers to the lab's subsystems.
func ourNVMeCtrls() []NVMeCtrl {
	var out []NVMeCtrl
	for _, c := range NVMeCtrls() {
		if strings.HasPrefix(c.SubNQN, NQNPrefix) {
			out = append(out, c)
		}
	}
	return out
}

// connectKernelNVMe connects every client to the subsystems of its LUNs
// and records each LUN's block device: the namespace of its own NSID
// on its own controller.
func connectKernelNVMe(s *State, log io.Writer) error {
	ctrls := map[[2]string]string{} // subsystem, host → controller
	for _, r := range s.targets() {
		for _, l := range r.LUNs {
			c, err := ConnectNVMe(l.Host, SubsystemNQN(r), 0)
			if err != nil {
				return err
			}
			ctrls[[2]string{SubsystemNQN(r), l.Host}] = c
		}
	}
	disk := func(r Resource, l LUN) string {
		c := ctrls[[2]string{SubsystemNQN(r), l.Host}]
		for _, k := range NVMeCtrls() {
			if k.Name == c {
				return k.Disks[l.Number]
			}
		}
		return ""
	}
	var missing []string
	err := WaitFor("the NVMe namespaces' block devices", 10*time.Second, func() bool {
		missing = missing[:0]
		for _, r := range s.targets() {
			for _, l := range r.LUNs {
				if disk(r, l) == "" {
					missing = append(missing, r.Name+"/"+l.Host)
				}
			}
		}
		return len(missing) == 0
	})
	if err != nil {
		return fmt.Errorf("%w: no block device for %s", err, strings.Join(missing, ", "))
	}
	var parts []string
	for _, r := range s.targetRefs() {
		for j := range r.LUNs {
			l := &r.LUNs[j]
			l.Device = disk(*r, *l)
			l.URL = "/dev/" + l.Device
			parts = append(parts, fmt.Sprintf("%s/%s→%s", r.Name, l.Host, l.Device))
		}
	}
	fmt.Fprintf(log, "NVMe/TCP host: %d controllers (%s)\n", len(parts), strings.Join(parts, " "))
	return nil
}

// targetRefs are pointers to every resource the lab serves, for updating.
func (s *State) targetRefs() []*Resource {
	var out []*Resource
	for i := range s.Resources {
		out = append(out, &s.Resources[i])
	}
	if s.RAM != nil {
		out = append(out, s.RAM)
	}
	return out
}

// nvmeHealth lists what is wrong with the NVMe/TCP side.
func nvmeHealth(s *State) []string {
	live := map[string]bool{}
	for _, c := range ourNVMeCtrls() {
		if c.State == "live" {
			for _, d := range c.Disks {
				live[d] = true
			}
		}
	}
	var p []string
	for _, r := range s.targets() {
		for _, l := range r.LUNs {
			if l.Device == "" || !live[l.Device] {
				p = append(p, fmt.Sprintf("no live controller of %s to %s (device %s)", l.Host, r.Name, l.Device))
			}
		}
	}
	return p
}

// removeNVMe disconnects every controller to the lab's subsystems (the
// recorded ones and any other with the label), then removes nvmet's
// objects: the port's links first (which closes the listener), the port,
// namespaces disabled and removed, subsystems.
func removeNVMe() []error {
	var errs []error
	for _, c := range ourNVMeCtrls() {
		if err := os.WriteFile(filepath.Join("/sys/class/nvme", c.Name, "delete_controller"), []byte("1"), 0o200); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("disconnect %s: %w", c.Name, err))
		}
	}
	if _, err := os.Stat(ConfigfsNVMet); err != nil {
		return errs
	}
	for _, o := range nvmetObjects() {
		if strings.HasSuffix(filepath.Dir(o), "namespaces") {
			os.WriteFile(filepath.Join(o, "enable"), []byte("0"), 0o644)
		}
		if err := removeCfg(o); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// nvmetObjects lists the lab's objects in nvmet, found by label, in the
// order they must be removed.
func nvmetObjects() []string {
	var out []string
	port := nvmetPortDir()
	if _, err := os.Stat(port); err == nil {
		links, _ := filepath.Glob(filepath.Join(port, "subsystems", "*"))
		out = append(append(out, links...), port)
	}
	subs, _ := filepath.Glob(filepath.Join(ConfigfsNVMet, "subsystems", NQNPrefix+"*"))
	sort.Strings(subs)
	for _, sub := range subs {
		nss, _ := filepath.Glob(filepath.Join(sub, "namespaces", "*"))
		hosts, _ := filepath.Glob(filepath.Join(sub, "allowed_hosts", "*"))
		out = append(append(append(out, hosts...), nss...), sub)
	}
	return out
}

// nvmeLeftovers lists the lab's controllers and nvmet objects still there.
func nvmeLeftovers() []string {
	var l []string
	for _, c := range ourNVMeCtrls() {
		l = append(l, fmt.Sprintf("nvme controller %s (%s)", c.Name, c.SubNQN))
	}
	for _, o := range nvmetObjects() {
		l = append(l, "configfs "+strings.TrimPrefix(o, "/sys/kernel/config/"))
	}
	return l
}
