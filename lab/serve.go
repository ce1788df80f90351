package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/sanqos/sanqos/lab/diskmodel"
)

// serveEnv labels the supervisor's environment: how Down and Leftovers
// find a supervisor, whatever its binary is called.
const serveEnv = "SANQOS_LAB_SERVE"

// ServeIfAsked runs the supervisor and exits when this process was started
// as one by Up; test binaries that build labs call it from TestMain.
func ServeIfAsked() {
	if os.Getenv(serveEnv) != "1" || len(os.Args) < 3 || os.Args[1] != "lab" || os.Args[2] != "serve" {
		return
	}
	if err := Serve(slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Serve is the lab supervisor (`sanqos-lab lab serve`): it serves each
// resource's modelled disk over FUSE and keeps tgtd running in the target
// namespace, restoring the targets if tgtd dies (with LIO, the kernel is
// the target: nothing to run), and with the kernel initiator keeps
// iscsid running. It serves the lab whose record carries its id
// (labIDEnv), records itself, its mounts and every tgtd it starts there,
// and acts only on those: its own tgtd by pid, never whatever answers on
// the control port.
//
// On SIGTERM it logs the kernel initiator's sessions out and stops
// iscsid, removes the LIO targets, stops its tgtd, detaches the LUN loop
// devices (they hold the mounts busy) and unmounts. When its lab's
// record is gone (or names another lab) it stops its own tgtd, unmounts
// what is still its own mount and exits, touching nothing else. A second
// signal during shutdown ends it at once.
func Serve(log *slog.Logger) error {
	s, err := LoadState()
	if err != nil {
		return err
	}
	id := os.Getenv(labIDEnv)
	if !recordIs(id) {
		return fmt.Errorf("the lab's record (%s) is not lab %q's: not serving it", recordPath(), id)
	}
	if err := recordProc("supervisor", os.Getpid(), strings.Join(os.Args, " ")); err != nil {
		return err
	}
	// Signals first: a SIGTERM while mounting must not kill us before
	// we can unmount.
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	servers, err := mountModels(s, log)
	if err != nil {
		return err
	}
	var stopping sync.WaitGroup
	quit := make(chan struct{})
	var tgtds []*ownTgtd
	if s.Options.TargetKind() == TargetTgt {
		for _, t := range s.Options.TargetHosts() {
			o := &ownTgtd{t: t}
			tgtds = append(tgtds, o)
			stopping.Add(1)
			go func() {
				defer stopping.Done()
				o.supervise(log.With("target", t.NS), quit)
			}()
		}
	}
	if s.Options.iscsiKernel() {
		stopping.Add(1)
		go func() {
			defer stopping.Done()
			superviseIscsid(log, quit)
		}()
	}
	ours := waitForEnd(stop, id, log)
	go func() {
		<-stop
		log.Warn("second signal: exiting now")
		for _, o := range tgtds {
			o.kill()
		}
		os.Exit(1)
	}()
	close(quit)
	shutdown(ours, id, tgtds, &stopping, servers, log)
	return nil
}

// shutdown stops what the supervisor runs: clients first, then the
// target, then what it serves from. The kernel initiator's sessions, LIO's
// objects and the loop devices are the lab's, not this process's: they
// are touched only while the record is this supervisor's lab's.
func shutdown(ours bool, id string, tgtds []*ownTgtd, stopping *sync.WaitGroup, servers []mounted, log *slog.Logger) {
	if ours {
		for _, err := range stopKernelInitiator() {
			log.Warn("kernel initiator", "err", err)
		}
		for _, err := range removeNVMe() {
			log.Warn("NVMe/TCP", "err", err)
		}
		for _, err := range removeLIO() {
			log.Warn("LIO", "err", err)
		}
	}
	for _, o := range tgtds {
		o.stop(ours, log)
	}
	waitBounded(stopping, 20*time.Second*Slowdown())
	if r, err := LoadRecord(); err == nil && ours && r.ID == id {
		for _, err := range detachLoops(r.ownedLoops()) {
			log.Warn("detach", "err", err)
		}
	}
	for _, srv := range servers {
		// The mount at that path may be a newer lab's: only our own.
		if mountDev(srv.mount) != srv.dev {
			log.Info("not unmounting: no longer ours", "mount", srv.mount)
			continue
		}
		if err := srv.Unmount(); err != nil {
			log.Warn("unmount", "err", err)
		}
	}
}

// mounted is a modelled disk the supervisor serves, with the device
// number of its mount.
type mounted struct {
	*fuse.Server
	mount, dev string
}

// mountModels mounts each resource's modelled disk and records each
// mount with its device number.
func mountModels(s *State, log *slog.Logger) ([]mounted, error) {
	var servers []mounted
	for _, r := range s.Resources {
		if r.Mount == "" {
			continue
		}
		disk := diskmodel.New(s.Options.Model)
		logQueue(disk, r.Name, log)
		srv, err := diskmodel.Mount(r.Store, r.Mount, disk)
		if err != nil {
			return nil, fmt.Errorf("mount %s: %w", r.Mount, err)
		}
		if err := srv.WaitMount(); err != nil {
			return nil, err
		}
		dev := mountDev(r.Mount)
		servers = append(servers, mounted{srv, r.Mount, dev})
		if err := record("fuse", r.Mount, dev); err != nil {
			return nil, err
		}
		log.Info("disk model mounted", "resource", r.Name, "mount", r.Mount, "dev", dev, "model", s.Options.Model)
	}
	return servers, nil
}

// logQueue has disk log its queue to QueueLog(name), written out every
// 100 ms, for the runs' onset floor (report.Backlog); without the file
// the lab serves as before.
func logQueue(disk *diskmodel.Disk, name string, log *slog.Logger) {
	f, err := os.Create(QueueLog(name))
	if err != nil {
		log.Warn("no queue log", "err", err)
		return
	}
	disk.LogTo(f)
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			if err := disk.Flush(); err != nil {
				log.Warn("queue log", "err", err)
				return
			}
		}
	}()
}

// QueueLog is the file where the supervisor logs resource name's queue.
func QueueLog(name string) string { return filepath.Join(StateDir, "queue-"+name+".bin") }

// waitForEnd waits for a signal or for the lab's record to stop being
// lab id's, and reports whether it still is (an orderly shutdown). The
// record is read once a second: a file another process removes has
// nothing to wait on.
func waitForEnd(stop <-chan os.Signal, id string, log *slog.Logger) bool {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case sig := <-stop:
			ours := recordIs(id)
			log.Info("stopping", "signal", sig, "record ours", ours)
			return ours
		case <-tick.C:
			if !recordIs(id) {
				log.Info("stopping: the lab's record is gone or another lab's")
				return false
			}
		}
	}
}

// recordIs reports whether the record is lab id's.
func recordIs(id string) bool {
	r, err := LoadRecord()
	return err == nil && id != "" && r.ID == id
}

// waitBounded waits for wg, at most limit.
func waitBounded(wg *sync.WaitGroup, limit time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
	}
}

func lunsAttached(s *State) bool {
	for _, r := range s.Resources {
		for _, l := range r.LUNs {
			if l.Loop == "" {
				return false
			}
		}
	}
	return true
}

var errQuitting = errors.New("stopping")
