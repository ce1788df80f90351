package lab

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Up builds the lab, or verifies an existing one (Up twice is fine). It
// holds the lab lock throughout and records what it makes as it makes it
// (record.go). A lab of its record that is broken, half-built by an
// interrupted Up, or built with other options is torn down first and built
// anew; leftovers no live lab owns are removed, and it says so. It refuses
// to build over a live lab its record does not own, and says how to
// remove it.
func Up(o Options, log io.Writer) (*State, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := CheckPrereqs(); err != nil {
		return nil, err
	}
	if o.InitiatorKind() == InitiatorKernel {
		if err := checkKernelInitiator(o); err != nil {
			return nil, err
		}
	}
	l, err := lockLab(Limits.Lock, log)
	if err != nil {
		return nil, err
	}
	defer l.release()
	reach("up:locked")
	rec, _ := LoadRecord()
	// A healthy lab as asked is used as it is, even one an older sanqos
	// built without a record: using it builds nothing over it.
	if s, err := LoadState(); err == nil && (rec == nil || rec.Complete) {
		problems := s.Health()
		switch {
		case len(problems) > 0:
			fmt.Fprintf(log, "lab is broken (%s): rebuilding\n", strings.Join(problems, "; "))
		case !s.Options.same(o):
			fmt.Fprintln(log, "lab was built with other options: rebuilding")
		default:
			fmt.Fprintln(log, "lab is already up")
			// A lab built by an older sanqos gets flow steering too.
			return s, steerByFlow()
		}
	} else if rec != nil && !rec.Complete {
		fmt.Fprintln(log, "the lab's last `lab up` was interrupted: rebuilding")
	}
	if err := checkIdle(); err != nil {
		return nil, fmt.Errorf("%w: not rebuilding the lab under it", err)
	}
	if live := unownedLive(rec); len(live) > 0 {
		return nil, fmt.Errorf("a lab that no record owns is running (%s), built by another sanqos or left by one: remove it with `%s lab down` (it removes every lab object, whoever made it), then run lab up again",
			strings.Join(live, "; "), os.Args[0])
	}
	if err := removeLab(log); err != nil {
		return nil, fmt.Errorf("clearing leftovers: %w", err)
	}
	s, err := build(o, log)
	if err == nil {
		reach("up:calibrated")
		err = record("complete")
	}
	if err != nil {
		removeLab(io.Discard) // never leave a half-built lab behind
		return nil, err
	}
	return s, nil
}

// build makes the lab from nothing, in order: network, stores and the
// supervisor, loop devices, targets, etcd, the kernel initiator, capacity.
// The bring-up is one ordered sequence, each step needing the one before;
// build reads as the lab's build order, its longer steps in functions of
// their own.
func build(o Options, log io.Writer) (*State, error) {
	id, err := newRecord()
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(log, "network: namespaces", strings.Join(o.namespaces(), " "))
	if err := setupNetwork(o); err != nil {
		return nil, err
	}
	reach("up:network")
	s := &State{Options: o, Created: time.Now().UTC()}
	for i, name := range o.Resources {
		r, err := newResource(o, i, name)
		if err != nil {
			return nil, err
		}
		s.Resources = append(s.Resources, r)
	}
	ram, err := newRAMResource()
	if err != nil {
		return nil, err
	}
	s.RAM = ram
	if err := s.save(); err != nil {
		return nil, err
	}
	if !o.RealDisk {
		loadFor("/dev/fuse", "fuse")
	}
	loadFor("/dev/loop-control", "loop")
	if o.iscsiKernel() {
		if err := prepareKernelInitiator(); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(log, "supervisor: starting ("+superviseWhat(o)+")")
	if err := startServe(s, id); err != nil {
		return nil, err
	}
	reach("up:supervisor")
	if err := attachLoops(s); err != nil {
		return nil, err
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	reach("up:loops")
	if err := configureTargetKind(s, log); err != nil {
		return nil, err
	}
	reach("up:targets")
	if o.targetCount() > 1 {
		fmt.Fprintln(log, "etcd: starting on", EtcdURL(), "(cluster control across the target hosts)")
		if err := StartEtcd(); err != nil {
			return nil, err
		}
	}
	if o.InitiatorKind() == InitiatorKernel {
		login := loginKernel
		if o.TargetKind() == TargetNVMet {
			login = connectKernelNVMe
		}
		if err := login(s, log); err != nil {
			return nil, err
		}
		if err := s.save(); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(log, "calibrating the shared resource…")
	if err := measureCapacities(s); err != nil {
		return nil, err
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

// newResource is resource i, name, with its store (and, unless on a real
// disk, its mount point) made and one LUN per host, its image file created
// empty at the LUN size.
func newResource(o Options, i int, name string) (Resource, error) {
	r := Resource{Name: name, TID: i + 1, IQN: IQNPrefix + name}
	if o.RealDisk {
		r.Store = filepath.Join(RealDir, name)
	} else {
		r.Store = filepath.Join(StoreDir, name)
		r.Mount = filepath.Join(StateDir, "pool", name)
	}
	for _, d := range []string{r.Store, r.Mount} {
		if d != "" {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return Resource{}, err
			}
		}
	}
	for j, h := range Hosts {
		l := LUN{Host: h, Number: j + 1, Store: filepath.Join(r.Store, h+".img")}
		l.File = l.Store
		if r.Mount != "" {
			l.File = filepath.Join(r.Mount, h+".img")
		}
		if err := os.Truncate(l.Store, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Resource{}, err
		}
		f, err := os.OpenFile(l.Store, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return Resource{}, err
		}
		err = f.Truncate(o.LUNSize)
		f.Close()
		if err != nil {
			return Resource{}, err
		}
		t := o.TargetOf(h)
		if t.NS != TargetNS {
			l.Target = t.NS
		}
		l.URL = fmt.Sprintf(`iscsi\://%s\:%d/%s/%d`, t.Addr, ISCSIPort, strings.ReplaceAll(r.IQN, ":", `\:`), l.Number)
		r.LUNs = append(r.LUNs, l)
	}
	return r, nil
}

// newRAMResource is the ram resource: one 256 MiB LUN for b2 on a file
// in the store directory, not on a modelled disk.
func newRAMResource() (*Resource, error) {
	ram := Resource{Name: "ram", TID: 100, IQN: IQNPrefix + "ram", Store: filepath.Join(StoreDir, "ram")}
	if err := os.MkdirAll(ram.Store, 0o700); err != nil {
		return nil, err
	}
	rl := LUN{Host: "b2", Number: 1, Store: filepath.Join(ram.Store, "b2.img")}
	rl.File, rl.Backing = rl.Store, rl.Store
	rl.URL = fmt.Sprintf(`iscsi\://%s\:%d/%s/1`, TargetAddr, ISCSIPort, strings.ReplaceAll(ram.IQN, ":", `\:`))
	if err := os.WriteFile(rl.Store, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(rl.Store, 256<<20); err != nil {
		return nil, err
	}
	ram.LUNs = []LUN{rl}
	return &ram, nil
}

// attachLoops attaches a loop device to each LUN's file.
func attachLoops(s *State) error {
	for i := range s.Resources {
		r := &s.Resources[i]
		for j := range r.LUNs {
			l := &r.LUNs[j]
			loop, err := attachLoop(l.File)
			if err != nil {
				return err
			}
			if err := record("loop", loop, backingOf(loop)); err != nil {
				return err
			}
			l.Loop, l.Backing = loop, "/dev/"+loop
		}
	}
	return nil
}

// configureTargetKind configures the targets, in LIO's configfs or, once
// its control sockets are up, in tgtd.
func configureTargetKind(s *State, log io.Writer) error {
	switch s.Options.TargetKind() {
	case TargetLIO:
		fmt.Fprintln(log, "LIO: targets in configfs, portal", fmt.Sprintf("%s:%d", TargetAddr, ISCSIPort), "in netns", TargetNS)
		if err := configureLIO(s, log); err != nil {
			return err
		}
	case TargetNVMet:
		return configureNVMet(s, log)
	default:
		if err := WaitFor("tgtd control sockets", 10*time.Second, s.TgtsReady); err != nil {
			return err
		}
		if err := configureTargetsLog(s, log); err != nil {
			return err
		}
	}
	return nil
}

// measureCapacities measures each resource's capacity where its LUN
// files are.
func measureCapacities(s *State) error {
	for _, r := range s.Resources {
		c, err := MeasureCapacity(cmp.Or(r.Mount, r.Store), 1500*time.Millisecond)
		if err != nil {
			return fmt.Errorf("capacity of %s: %w", r.Name, err)
		}
		s.Capacity = append(s.Capacity, c)
	}
	return nil
}

// startServe launches the supervisor (`sanqos-lab lab serve`) of lab id in
// its own session so it outlives this command, and waits until it has
// mounted the modelled disks. The supervisor records itself.
func startServe(s *State, id string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "lab", "serve")
	// The env vars let a test binary (whose TestMain calls ServeIfAsked)
	// act as the supervisor, label the supervisor (Down finds it by them,
	// not by the binary's name) and name its lab.
	cmd.Env = append(os.Environ(), serveEnv+"=1", labIDEnv+"="+id)
	if err := startDetached(cmd, ServeLog); err != nil {
		return err
	}
	s.ServePID = cmd.Process.Pid
	cmd.Process.Release()
	if err := s.save(); err != nil {
		return err
	}
	err = WaitFor("disk model mounts", 10*time.Second, func() bool {
		if !alive(s.ServePID) {
			return true // fail now, not at the timeout
		}
		n := 0
		for _, r := range s.Resources {
			if r.Mount == "" || isMounted(r.Mount) {
				n++
			}
		}
		return n == len(s.Resources)
	})
	if err == nil && !alive(s.ServePID) {
		err = fmt.Errorf("the supervisor exited at start (see %s)", ServeLog)
	}
	return err
}

// loadFor loads module where its device node dev is missing: a stock
// kernel (the QEMU guest's) has FUSE and loop as modules, which nothing
// there loads on open of a node that does not exist yet. A failure is the
// device's user's to report.
func loadFor(dev, module string) {
	if _, err := os.Stat(dev); err != nil {
		Exec("modprobe", module)
	}
}

func isMounted(dir string) bool { return slices.Contains(ourMounts(), dir) }

// WaitFor polls a readiness condition of an outside process (a daemon
// coming up); it is not used to order our own goroutines.
// In a TCG guest the timeout stretches by Slowdown.
func WaitFor(what string, timeout time.Duration, ok func() bool) error {
	timeout *= Slowdown()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s (see %s)", timeout, what, ServeLog)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Health lists what is wrong with a built lab (empty: healthy).
func (s *State) Health() []string {
	var p []string
	for _, ns := range s.Options.namespaces() {
		if !nsExists(ns) {
			p = append(p, "namespace "+ns+" missing")
		}
	}
	if !alive(s.ServePID) {
		p = append(p, "supervisor not running")
	}
	switch s.Options.TargetKind() {
	case TargetLIO:
		if !lioReady(s) {
			p = append(p, "LIO targets not enabled")
		}
	case TargetNVMet:
		if !nvmetReady(s) {
			p = append(p, "nvmet port not exporting every subsystem")
		}
	default:
		for _, t := range s.Options.TargetHosts() {
			if !tgtReadyOn(t) {
				p = append(p, "tgtd of "+t.NS+" not answering")
			}
		}
	}
	if s.Options.targetCount() > 1 && !EtcdRunning() {
		p = append(p, "etcd not running")
	}
	switch {
	case s.Options.iscsiKernel():
		p = append(p, kernelHealth(s)...)
	case s.Options.InitiatorKind() == InitiatorKernel:
		p = append(p, nvmeHealth(s)...)
	}
	for _, r := range s.Resources {
		for _, l := range r.LUNs {
			if _, err := os.Stat("/sys/block/" + l.Loop); l.Loop == "" || err != nil {
				p = append(p, "loop device of "+r.Name+"/"+l.Host+" missing")
			}
		}
	}
	return p
}

// startDetached starts cmd in its own session, so that it outlives this
// command, with its output appended to logPath. It (and what it starts,
// the supervisor's tgtd) keeps none of the descriptors this process
// inherited: run as `flock LOCK sanqos-lab lab up`, the supervisor held
// the lock for as long as the lab was up.
func startDetached(cmd *exec.Cmd, logPath string) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	CloexecInherited()
	return cmd.Start()
}

// CloexecInherited marks every descriptor above stderr close-on-exec. Go
// opens its own that way; the rest came from whoever started us, such as
// the lock of `flock LOCK cmd`, which a QEMU guest, supervisor or etcd
// that outlives this process would otherwise hold for as long as it runs.
func CloexecInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
