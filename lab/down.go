package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Down removes everything the lab made, whether or not state survived:
// first what its record says it made (whatever the binary that made it is
// called, and however that `lab up` ended), then every lab object no live
// lab owns, found by label (fixed namespace names, files under StateDir
// and StoreDir, tgtd's control ports, the supervisor's environment). It
// says what it removed. It refuses while an experiment is running (see
// ForceDown).
func Down(log io.Writer) error { return down(log, false) }

// ForceDown is Down even while an experiment runs (it will fail).
func ForceDown(log io.Writer) error { return down(log, true) }

func down(log io.Writer, force bool) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	l, err := lockLab(Limits.Lock, log)
	if err != nil {
		return err
	}
	defer l.release()
	reach("down:locked")
	if !force {
		if err := checkIdle(); err != nil {
			return fmt.Errorf("%w: stop it first, or use --force", err)
		}
	}
	err = removeLab(log)
	if err == nil {
		fmt.Fprintln(log, "lab is down")
	}
	return err
}

// removed collects what removeLab removed, the record's objects apart
// from leftovers no live lab owned, to say so.
type removed struct{ owned, left []string }

// add notes a leftover removed (what the record owned is listed before
// anything is removed: the supervisor takes much of it with it).
func (r *removed) add(owned bool, what string) {
	if !owned {
		r.left = append(r.left, what)
	}
}

func (r *removed) print(log io.Writer) {
	if len(r.owned) > 0 {
		fmt.Fprintf(log, "removed the lab's %s\n", strings.Join(r.owned, ", "))
	}
	if len(r.left) > 0 {
		fmt.Fprintf(log, "removed leftovers no live lab owned: %s\n", strings.Join(r.left, ", "))
	}
}

// removeLab removes the recorded lab and every leftover; the caller holds
// the lab lock. The record goes last, with StateDir, so a removal cut
// short is finished by the next one. Every step is bounded in time.
func removeLab(log io.Writer) error {
	rec, _ := LoadRecord() // nil: no record, everything is a leftover
	rm := removed{owned: rec.present()}
	var errs []error
	// The supervisors first, so none restarts what we stop; SIGTERM lets
	// the recorded one stop its tgtd through tgtadm and unmount.
	stopProcs(rec, supervisors(), 25*time.Second, "supervisor", &rm)
	reach("down:supervisor")
	// What a supervisor stops, again, in case it was dead: its tgtd (the
	// recorded one by pid and start time, any other on our control ports),
	// etcd, the kernel initiator's sessions and iscsid, LIO's objects.
	var tgtds []int
	for _, t := range allTargets() {
		tgtds = append(tgtds, tgtdPids(t)...)
	}
	stopProcs(rec, procsOf(tgtds), 0, "tgtd", &rm)
	for _, t := range allTargets() {
		removeTgtdSockets(t)
	}
	reach("down:tgtd")
	stopProcs(rec, procsOf(FindProcs(isOurEtcd)), 5*time.Second, "etcd", &rm)
	errs = append(errs, stopKernelInitiator()...)
	errs = append(errs, removeNVMe()...)
	errs = append(errs, removeLIO()...)
	for _, ns := range Namespaces() {
		if pids := nsPids(ns); len(pids) > 0 {
			KillAll(pids)
			rm.add(false, fmt.Sprintf("%d processes in netns %s", len(pids), ns))
		}
	}
	errs = append(errs, removeLoops(rec, &rm)...)
	reach("down:loops")
	errs = append(errs, removeMounts(rec, &rm)...)
	reach("down:mounts")
	errs = append(errs, removeNamespaces(rec, &rm)...)
	// The iSCSI and NVMe modules `lab up` loaded, only those (its record).
	errs = append(errs, unloadModules(kernelModules)...)
	if left := ourMounts(); len(left) > 0 {
		// Never walk into a mount we could not take away.
		errs = append(errs, fmt.Errorf("still mounted, %s kept: %s", StateDir, strings.Join(left, " ")))
	} else if err := os.RemoveAll(StateDir); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []string{StoreDir, RealDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	rm.print(log)
	return errors.Join(errs...)
}

// stopProcs stops every process of found (kind, e.g. "supervisor") and
// every one the record names among its kind that still runs: SIGTERM,
// then SIGKILL after grace (0: SIGKILL at once, for tgtd, which ignores
// SIGTERM). Each is said to be the lab's or a leftover's.
func stopProcs(rec *Record, found []Proc, grace time.Duration, kind string, rm *removed) {
	all := map[int]Proc{}
	for _, p := range found {
		all[p.PID] = p
	}
	if rec != nil {
		var mine []Proc
		switch kind {
		case "supervisor":
			mine = rec.Supervisor
		case "tgtd":
			mine = rec.Tgtd
		case "etcd":
			mine = rec.Etcd
		}
		for _, p := range mine {
			if _, ok := all[p.PID]; !ok && p.Alive() {
				all[p.PID] = p
			}
		}
	}
	var pids []int
	for pid, p := range all {
		sig := syscall.SIGTERM
		if grace == 0 {
			sig = syscall.SIGKILL
		}
		if p.signal(sig) {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	gone := func() bool {
		for _, pid := range pids {
			if all[pid].Alive() {
				return false
			}
		}
		return true
	}
	if WaitFor(kind+" exit", max(grace, 5*time.Second), gone) != nil && grace > 0 {
		for _, pid := range pids {
			all[pid].signal(syscall.SIGKILL)
		}
		WaitFor(kind+" exit after SIGKILL", 5*time.Second, gone)
	}
	for _, pid := range pids {
		rm.add(recorded(rec, all[pid]), fmt.Sprintf("%s pid %d (%s)", kind, pid, all[pid].What))
	}
}

// recorded reports whether the record names p (it may have exited by now).
func recorded(rec *Record, p Proc) bool {
	if rec == nil {
		return false
	}
	for _, list := range [][]Proc{rec.Supervisor, rec.Tgtd, rec.Etcd} {
		for _, q := range list {
			if q.PID == p.PID && q.Start == p.Start {
				return true
			}
		}
	}
	return false
}

// present lists what the record owns that still exists.
func (r *Record) present() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, kind := range []struct {
		name  string
		procs []Proc
	}{{"supervisor", r.Supervisor}, {"tgtd", r.Tgtd}, {"etcd", r.Etcd}} {
		for _, p := range kind.procs {
			if p.Alive() {
				out = append(out, fmt.Sprintf("%s pid %d", kind.name, p.PID))
			}
		}
	}
	for _, l := range r.ownedLoops() {
		out = append(out, "loop device "+l)
	}
	for _, m := range keysOf(r.Fuse) {
		if mountDev(m) == r.Fuse[m] {
			out = append(out, "mount "+m)
		}
	}
	for _, ns := range Namespaces() {
		if ino := nsInode(ns); ino != 0 && r.Netns[ns] == ino {
			out = append(out, "netns "+ns)
		}
	}
	return out
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ownedLoops are the recorded loop devices still bound to the file the
// record says (a loop device detached and reused is no longer ours).
func (r *Record) ownedLoops() []string {
	var out []string
	for loop, file := range r.Loops {
		if backingOf(loop) == file {
			out = append(out, loop)
		}
	}
	sort.Strings(out)
	return out
}

// backingOf is loop device loop's backing file ("" if unbound).
func backingOf(loop string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", loop, "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func removeLoops(rec *Record, rm *removed) []error {
	owned := map[string]bool{}
	if rec != nil {
		for _, l := range rec.ownedLoops() {
			owned[l] = true
		}
	}
	var errs []error
	for _, l := range unique(append(keysOf(owned), ourLoops()...)) {
		if _, err := Exec("losetup", "-d", "/dev/"+l); err != nil {
			errs = append(errs, err)
			continue
		}
		rm.add(owned[l], "loop device "+l)
	}
	return errs
}

// removeMounts unmounts the recorded FUSE mounts and every other mount
// under StateDir, lazily where busy.
func removeMounts(rec *Record, rm *removed) []error {
	var errs []error
	for _, m := range ourMounts() {
		owned := rec != nil && rec.Fuse[m] != "" && rec.Fuse[m] == mountDev(m)
		if _, err := Exec("umount", m); err != nil {
			if _, err := Exec("umount", "-l", m); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		rm.add(owned, "mount "+m)
	}
	return errs
}

// removeNamespaces deletes the lab's namespaces (and the kernel
// initiator's links in this one).
func removeNamespaces(rec *Record, rm *removed) []error {
	var errs []error
	for _, d := range kernelClientDevs() {
		if _, err := Exec("ip", "link", "del", d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range Namespaces() {
		ino := nsInode(ns)
		if ino == 0 {
			continue
		}
		if _, err := Exec("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
			continue
		}
		rm.add(rec != nil && rec.Netns[ns] == ino, "netns "+ns)
	}
	return errs
}

func unique(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// unownedLive lists the lab processes that run and that the record does
// not own: a lab `lab up` must not build over (Down removes it).
func unownedLive(rec *Record) []string {
	var out []string
	for _, p := range supervisors() {
		if !rec.owns(p.PID) {
			out = append(out, fmt.Sprintf("supervisor pid %d (%s)", p.PID, p.What))
		}
	}
	for _, t := range allTargets() {
		for _, p := range procsOf(tgtdPids(t)) {
			if !rec.owns(p.PID) {
				out = append(out, fmt.Sprintf("tgtd pid %d (control port %d)", p.PID, t.CtlPort))
			}
		}
	}
	return out
}

// Leftovers lists lab objects that still exist (empty after a clean Down).
func Leftovers() []string {
	var l []string
	for _, ns := range Namespaces() {
		if nsExists(ns) {
			l = append(l, "netns "+ns)
		}
	}
	for _, lp := range ourLoops() {
		l = append(l, "loop "+lp)
	}
	for _, m := range ourMounts() {
		l = append(l, "mount "+m)
	}
	if len(FindProcs(IsOurTgtd)) > 0 {
		l = append(l, "tgtd")
	}
	for _, p := range supervisors() {
		l = append(l, fmt.Sprintf("supervisor pid %d (%s)", p.PID, p.What))
	}
	if EtcdRunning() {
		l = append(l, "etcd")
	}
	l = append(l, kernelLeftovers()...)
	l = append(l, lioLeftovers()...)
	l = append(l, nvmeLeftovers()...)
	for _, d := range []string{StateDir, StoreDir, RealDir} {
		if _, err := os.Stat(d); err == nil {
			l = append(l, "dir "+d)
		}
	}
	return l
}
