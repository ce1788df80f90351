package lab

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/sanqos/sanqos/lab/diskmodel"
)

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

// Serve is the lab supervisor (`sanqos lab serve`): it serves each
// resource's modelled disk over FUSE and keeps tgtd running in the target
// namespace, restoring the targets if tgtd dies (with LIO, the kernel is
// the target: nothing to run), and with the kernel initiator keeps
// iscsid running. On SIGTERM it logs the kernel initiator's sessions out
// and stops iscsid, removes the LIO targets or stops tgtd, detaches the
// LUN loop devices (they hold the mounts busy) and unmounts.
func Serve(log *slog.Logger) error {
	s, err := LoadState()
	if err != nil {
		return err
	}
	var servers []*fuse.Server
	for _, r := range s.Resources {
		if r.Mount == "" {
			continue
		}
		srv, err := diskmodel.Mount(r.Store, r.Mount, diskmodel.New(s.Options.Model))
		if err != nil {
			return fmt.Errorf("mount %s: %w", r.Mount, err)
		}
		if err := srv.WaitMount(); err != nil {
			return err
		}
		servers = append(servers, srv)
		log.Info("disk model mounted", "resource", r.Name, "mount", r.Mount, "model", s.Options.Model)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var stopping sync.WaitGroup
	quit := make(chan struct{})
	if s.Options.TargetKind() == TargetTgt {
		for _, t := range s.Options.TargetHosts() {
			stopping.Add(1)
			go func() {
				defer stopping.Done()
				superviseTgtd(t, log.With("target", t.NS), quit)
			}()
		}
	}
	if s.Options.InitiatorKind() == InitiatorKernel {
		stopping.Add(1)
		go func() {
			defer stopping.Done()
			superviseIscsid(log, quit)
		}()
	}
	<-stop
	log.Info("stopping")
	close(quit)
	// Clients first, then the target, then what it serves from.
	for _, err := range stopKernelInitiator() {
		log.Warn("kernel initiator", "err", err)
	}
	for _, err := range removeLIO() {
		log.Warn("LIO", "err", err)
	}
	stopTgtd()
	stopping.Wait()
	if cur, err := LoadState(); err == nil {
		s = cur
	}
	var loops []string
	for _, r := range s.Resources {
		for _, l := range r.LUNs {
			if l.Loop != "" {
				loops = append(loops, l.Loop)
			}
		}
	}
	for _, err := range detachLoops(loops) {
		log.Warn("detach", "err", err)
	}
	for _, srv := range servers {
		if err := srv.Unmount(); err != nil {
			log.Warn("unmount", "err", err)
		}
	}
	return nil
}

// superviseTgtd runs target host t's tgtd in the foreground inside its
// namespace and restarts it (with the lab's targets) whenever it exits
// unasked.
func superviseTgtd(t TargetHost, log *slog.Logger, quit <-chan struct{}) {
	backoff := 200 * time.Millisecond
	for restart := false; ; restart = true {
		cmd := exec.Command("ip", "netns", "exec", t.NS, "tgtd", "-f", "-C", t.port(),
			"--iscsi", fmt.Sprintf("portal=%s:%d", t.Addr, ISCSIPort))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			log.Error("tgtd start", "err", err)
			return
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		go func() {
			// Restore targets once a restarted daemon answers (the first
			// start is configured by Up, which creates the loop devices).
			if !restart || WaitFor("tgtd", 10*time.Second, func() bool { return tgtReadyOn(t) }) != nil {
				return
			}
			if s, err := LoadState(); err == nil && lunsAttached(s) {
				if err := configureTargetsOn(s, t, nil); err != nil {
					log.Error("restore targets", "err", err)
				}
			}
		}()
		select {
		case <-quit:
			<-done
			return
		case err := <-done:
			log.Warn("tgtd exited; restarting", "err", err, "after", backoff)
			select {
			case <-quit:
				return
			case <-time.After(backoff):
			}
		}
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
