package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LIO, the kernel's iSCSI target (`lab up --target lio`), configured
// through configfs directly — what targetcli (rtslib-fb) does, without
// depending on it:
//
//	core/iblock_31/sanqos-lab-vg1-b2        a backstore per LUN on its loop device
//	core/fileio_31/sanqos-lab-ram-b2        the RAM LUN: a file in tmpfs
//	iscsi/iqn.2026-11.lab:vg1/tpgt_1        one target, one TPG per resource
//	  lun/lun_N/sanqos → core/…             the TPG's LUNs
//	  acls/iqn.2026-11.lab:bX/lun_N/sanqos  one ACL per client, its LUN mapped at N
//	  np/10.99.0.1:3260                     the portal, made from inside netns bm
//	  attrib/{authentication,generate_node_acls,demo_mode_write_protect}=0
//	  enable=1
//
// The HBA index 31 (like tgtd's control port) and the names' prefix label
// the lab's objects, so Down finds them after a crash. The explicit ACLs
// are what lets discovery see each client's address: LIO's configfs gives
// a session's connections (acls/NAME/info) only for a node ACL; a
// demo-mode session appears by name alone (dynamic_sessions).

// ConfigfsTarget is LIO's configfs root.
const ConfigfsTarget = "/sys/kernel/config/target"

// LIOConfigfs is a second mount of configfs for processes the lab starts
// with `ip netns exec`, which mounts a fresh sysfs over /sys and with it
// hides /sys/kernel/config: the agent in bm reads LIO from here.
var LIOConfigfs = filepath.Join(StateDir, "configfs")

const (
	lioHBA    = 31 // core/iblock_31, core/fileio_31
	lioTag    = 1  // tpgt_1
	lioPrefix = "sanqos-lab-"
	lioLink   = "sanqos" // name of the lab's configfs symlinks
)

func lioTPG(iqn string) string {
	return filepath.Join(ConfigfsTarget, "iscsi", iqn, "tpgt_"+strconv.Itoa(lioTag))
}

// lioObject is the backstore of one LUN.
func lioObject(r Resource, l LUN) (dir, control string) {
	name := lioPrefix + r.Name + "-" + l.Host
	if isBlockDev(l.Backing) {
		return filepath.Join(ConfigfsTarget, "core", fmt.Sprintf("iblock_%d", lioHBA), name), "udev_path=" + l.Backing
	}
	st, _ := os.Stat(l.Backing)
	var size int64
	if st != nil {
		size = st.Size()
	}
	return filepath.Join(ConfigfsTarget, "core", fmt.Sprintf("fileio_%d", lioHBA), name), fmt.Sprintf("fd_dev_name=%s,fd_dev_size=%d", l.Backing, size)
}

func writeAttr(path, v string) error {
	if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
		return fmt.Errorf("configfs: %w", err)
	}
	return nil
}

func mkdirCfg(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("configfs: %w", err)
	}
	return nil
}

// inNetns runs f on a thread in the named network namespace and puts the
// thread back in this one after; should that fail, the thread stays
// locked and Go discards it with its goroutine. (Only the thread moves:
// were it the main one, /proc/PID/ns/net would name bm while f runs.)
func inNetns(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer self.Close()
		fd, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			ch <- err
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", ns, err))
			return
		}
		runtime.UnlockOSThread()
		ch <- ferr
	}()
	return <-ch
}

// configureLIO builds the lab's targets in LIO. Every object it makes is
// recorded first, so a failure half-way is undone by Down.
func configureLIO(s *State, log io.Writer) error {
	before := loadedModules()
	defer recordModules(before, kernelModules)
	if err := mountConfigfs(); err != nil {
		return fmt.Errorf("LIO: %w", err)
	}
	if _, err := os.Stat(ConfigfsTarget); err != nil {
		Exec("modprobe", "target_core_mod")
	}
	for _, m := range []string{"target_core_iblock", "target_core_file", "iscsi_target_mod"} {
		if !before[m] {
			if _, err := Exec("modprobe", m); err != nil {
				return fmt.Errorf("LIO: %w", err)
			}
		}
	}
	if _, err := os.Stat(ConfigfsTarget); err != nil {
		return fmt.Errorf("LIO: %s: %w (is configfs mounted?)", ConfigfsTarget, err)
	}
	iscsi := filepath.Join(ConfigfsTarget, "iscsi")
	if _, err := os.Stat(iscsi); err != nil {
		// The fabric's directory: made here, so removed by Down.
		if err := record("configfs", iscsi); err != nil {
			return err
		}
		if err := mkdirCfg(iscsi); err != nil {
			return err
		}
	}
	for _, r := range s.targets() {
		if err := lioTarget(r, log); err != nil {
			return fmt.Errorf("LIO target %s: %w", r.IQN, err)
		}
	}
	return mountAgentConfigfs()
}

// mountConfigfs mounts configfs where it belongs unless it is: it is a
// module on the stock kernel, not loaded when the guest's init tried to
// mount it. A mount made here is recorded, for Down to undo.
func mountConfigfs() error {
	if mountedAs("/sys/kernel/config", "configfs") {
		return nil
	}
	if _, err := Exec("modprobe", "configfs"); err != nil {
		return err
	}
	if mountedAs("/sys/kernel/config", "configfs") {
		return nil
	}
	if err := record("mount", "/sys/kernel/config"); err != nil {
		return err
	}
	_, err := Exec("mount", "-t", "configfs", "configfs", "/sys/kernel/config")
	return err
}

// mountAgentConfigfs mounts a second view of configfs for the agent in
// bm (ip netns exec hides /sys/kernel/config).
func mountAgentConfigfs() error {
	if err := os.MkdirAll(LIOConfigfs, 0o755); err != nil {
		return err
	}
	if !isMounted(LIOConfigfs) {
		if _, err := Exec("mount", "-t", "configfs", "configfs", LIOConfigfs); err != nil {
			return err
		}
	}
	return nil
}

func lioTarget(r Resource, log io.Writer) error {
	for _, hba := range []string{fmt.Sprintf("iblock_%d", lioHBA), fmt.Sprintf("fileio_%d", lioHBA)} {
		if err := mkdirCfg(filepath.Join(ConfigfsTarget, "core", hba)); err != nil {
			return err
		}
	}
	for _, l := range r.LUNs {
		dir, control := lioObject(r, l)
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		if err := mkdirCfg(dir); err != nil {
			return err
		}
		if err := writeAttr(filepath.Join(dir, "control"), control); err != nil {
			return err
		}
		// udev_path is informational for fileio and iblock alike; rtslib
		// sets it, and discovery reads the backing store from it.
		if err := writeAttr(filepath.Join(dir, "udev_path"), l.Backing); err != nil {
			return err
		}
		if err := writeAttr(filepath.Join(dir, "enable"), "1"); err != nil {
			return err
		}
		if log != nil && !isBlockDev(l.Backing) {
			fmt.Fprintf(log, "LIO: %s served by fileio (buffered: tmpfs)\n", l.Backing)
		}
	}
	tpg := lioTPG(r.IQN)
	if err := mkdirCfg(filepath.Dir(tpg)); err != nil {
		return err
	}
	if err := mkdirCfg(tpg); err != nil {
		return err
	}
	for _, l := range r.LUNs {
		dir, _ := lioObject(r, l)
		lun := filepath.Join(tpg, "lun", "lun_"+strconv.Itoa(l.Number))
		if err := mkdirCfg(lun); err != nil {
			return err
		}
		if err := symlinkCfg(dir, filepath.Join(lun, lioLink)); err != nil {
			return err
		}
	}
	for k, v := range map[string]string{"authentication": "0", "generate_node_acls": "0", "demo_mode_write_protect": "0"} {
		if err := writeAttr(filepath.Join(tpg, "attrib", k), v); err != nil {
			return err
		}
	}
	// One ACL per client, mapping its own LUN at the same number (the
	// libiscsi URLs' LUN stays valid): each session sees one LUN.
	for _, l := range r.LUNs {
		acl := filepath.Join(tpg, "acls", IQNPrefix+l.Host)
		if err := mkdirCfg(acl); err != nil {
			return err
		}
		mapped := filepath.Join(acl, "lun_"+strconv.Itoa(l.Number))
		if err := mkdirCfg(mapped); err != nil {
			return err
		}
		if err := symlinkCfg(filepath.Join(tpg, "lun", "lun_"+strconv.Itoa(l.Number)), filepath.Join(mapped, lioLink)); err != nil {
			return err
		}
	}
	// The portal's listening socket is made by the kernel in the network
	// namespace of the process writing configfs (iscsit_setup_np's
	// sock_create, in mkdir's context): here, bm.
	np := filepath.Join(tpg, "np", fmt.Sprintf("%s:%d", TargetAddr, ISCSIPort))
	if _, err := os.Stat(np); err != nil {
		if err := inNetns(TargetNS, func() error { return mkdirCfg(np) }); err != nil {
			return err
		}
	}
	return writeAttr(filepath.Join(tpg, "enable"), "1")
}

func symlinkCfg(dst, link string) error {
	if _, err := os.Lstat(link); err == nil {
		return nil
	}
	if err := os.Symlink(dst, link); err != nil {
		return fmt.Errorf("configfs: %w", err)
	}
	return nil
}

// lioReady reports whether every target of the lab is enabled in LIO.
func lioReady(s *State) bool {
	for _, r := range s.targets() {
		b, err := os.ReadFile(filepath.Join(lioTPG(r.IQN), "enable"))
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			return false
		}
	}
	return true
}

// lioObjects lists the lab's objects in LIO, found by label (target IQN
// prefix, HBA index), in the order they must be removed.
func lioObjects() []string {
	var out []string
	// luns adds each LUN directory matching pattern after its links.
	luns := func(pattern string) {
		ls, _ := filepath.Glob(pattern)
		for _, l := range ls {
			links, _ := filepath.Glob(filepath.Join(l, "*"))
			for _, k := range links {
				if st, err := os.Lstat(k); err == nil && st.Mode()&os.ModeSymlink != 0 {
					out = append(out, k)
				}
			}
			out = append(out, l)
		}
	}
	tgts, _ := filepath.Glob(filepath.Join(ConfigfsTarget, "iscsi", IQNPrefix+"*"))
	sort.Strings(tgts)
	for _, t := range tgts {
		tpgs, _ := filepath.Glob(filepath.Join(t, "tpgt_*"))
		for _, tpg := range tpgs {
			nps, _ := filepath.Glob(filepath.Join(tpg, "np", "*"))
			out = append(out, nps...)
			acls, _ := filepath.Glob(filepath.Join(tpg, "acls", "*"))
			for _, a := range acls {
				luns(filepath.Join(a, "lun_*"))
				out = append(out, a)
			}
			luns(filepath.Join(tpg, "lun", "lun_*"))
			out = append(out, tpg)
		}
		out = append(out, t)
	}
	for _, hba := range []string{fmt.Sprintf("iblock_%d", lioHBA), fmt.Sprintf("fileio_%d", lioHBA)} {
		dir := filepath.Join(ConfigfsTarget, "core", hba)
		objs, _ := filepath.Glob(filepath.Join(dir, lioPrefix+"*"))
		out = append(out, objs...)
		if _, err := os.Stat(dir); err == nil {
			out = append(out, dir)
		}
	}
	return out
}

// removeLIO removes every LIO object the lab made, in reverse order of
// creation: TPGs disabled, portals, ACLs' LUN mappings and ACLs, LUNs,
// TPGs, targets, backstores, HBAs, the fabric directory if the lab made
// it; then unloads the target modules the lab loaded, and only those.
func removeLIO() []error {
	var errs []error
	if _, err := os.Stat(ConfigfsTarget); err == nil {
		tpgs, _ := filepath.Glob(filepath.Join(ConfigfsTarget, "iscsi", IQNPrefix+"*", "tpgt_*", "enable"))
		for _, e := range tpgs {
			os.WriteFile(e, []byte("0"), 0o644)
		}
		for _, o := range lioObjects() {
			if err := removeCfg(o); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if isMounted(LIOConfigfs) {
		if _, err := Exec("umount", LIOConfigfs); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range recordedOf("configfs") {
		if !strings.HasPrefix(p, ConfigfsTarget+"/") {
			continue // nvmet's: removeNVMe's
		}
		if err := removeCfg(p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range recordedOf("mount") {
		if mountedAs(m, "configfs") {
			if _, err := Exec("umount", m); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// removeCfg removes one configfs object; one already gone (a supervisor
// stopping meanwhile removes the same) is no error.
func removeCfg(p string) error {
	st, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		err = os.Remove(p)
	} else {
		err = unix.Rmdir(p)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("configfs: remove %s: %w", p, err)
	}
	return nil
}

// recordedOf lists what the record says the lab made in the kernel
// beyond its labelled objects, of one kind: "module" (loaded by `lab
// up`), "configfs" (directories that were not there), "mount". Down
// undoes exactly these.
func recordedOf(kind string) []string {
	b, _ := os.ReadFile(recordPath())
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == kind {
			out = append(out, v)
		}
	}
	return out
}

// loadedModules reads /proc/modules.
func loadedModules() map[string]bool {
	b, _ := os.ReadFile("/proc/modules")
	m := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m
}

// recordModules adds to the record the modules of set that are loaded now
// and were not before.
func recordModules(before map[string]bool, set []string) {
	now := loadedModules()
	have := map[string]bool{}
	for _, m := range recordedOf("module") {
		have[m] = true
	}
	for _, m := range set {
		if now[m] && !before[m] && !have[m] {
			record("module", m)
		}
	}
}

// unloadModules removes the modules the record says the lab loaded, in
// the order of order (users before what they use).
func unloadModules(order []string) []error {
	ours := map[string]bool{}
	for _, m := range recordedOf("module") {
		ours[m] = true
	}
	var errs []error
	loaded := loadedModules()
	for _, m := range order {
		if !ours[m] || !loaded[m] {
			continue
		}
		// One something else took meanwhile stays.
		if b, err := os.ReadFile("/sys/module/" + m + "/refcnt"); err == nil && strings.TrimSpace(string(b)) != "0" {
			continue
		}
		if _, err := Exec("rmmod", m); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// lioLeftovers lists the lab's objects still in LIO.
func lioLeftovers() []string {
	var l []string
	for _, o := range lioObjects() {
		l = append(l, "configfs "+strings.TrimPrefix(o, ConfigfsTarget+"/"))
	}
	return l
}

// DiscoveryYAML is the agent config's discovery section for the lab's
// target: tgtadm on target host t's tgtd control port, or LIO's configfs through the
// lab's second mount (the agent runs under ip netns exec).
func (s *State) DiscoveryYAML(t TargetHost) string {
	if s != nil && s.Options.TargetKind() == TargetNVMet {
		return fmt.Sprintf("iscsi_port: %d\ndiscovery:\n  source: nvmet\n  root: %s\n", NVMePort, filepath.Join(LIOConfigfs, "nvmet"))
	}
	if s != nil && s.Options.TargetKind() == TargetLIO {
		return fmt.Sprintf("discovery:\n  source: lio\n  root: %s\n", filepath.Join(LIOConfigfs, "target"))
	}
	return fmt.Sprintf("discovery:\n  source: tgt\n  tgt_control_port: %d\n", t.CtlPort)
}

// mountedAs reports whether dir is a mount point of filesystem type fstype.
func mountedAs(dir, fstype string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[1] == dir && f[2] == fstype {
			return true
		}
	}
	return false
}

func isBlockDev(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
}
