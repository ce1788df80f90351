package discover

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"
)

// Tgt asks a running tgtd for its targets and the portals they are
// exported on. controlPort is tgtadm's -C (0: tgtd's default control
// socket). The program is run directly, never through a shell, with a
// timeout so a hung tgtd cannot stall discovery.
func Tgt(controlPort int) ([]Target, error) {
	return ReadTgt(controlPort, func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "tgtadm", args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("tgtadm: %v: %s", err, bytes.TrimSpace(errb.Bytes()))
		}
		return out.Bytes(), nil
	})
}

// TgtadmShow is tgtadm's arguments to show mode ("target", "portal") of
// the tgtd on controlPort.
func TgtadmShow(controlPort int, mode string) []string {
	args := []string{"--lld", "iscsi", "--op", "show", "--mode", mode}
	if controlPort != 0 {
		args = append([]string{"-C", strconv.Itoa(controlPort)}, args...)
	}
	return args
}

// ReadTgt reads tgtd's targets and portals through tgtadm (its
// arguments → its output; doctor passes its own runner). tgt's portals
// belong to the daemon, not to a target: every target is exported on
// all of them, so each gets their ports.
func ReadTgt(controlPort int, tgtadm func(args ...string) ([]byte, error)) ([]Target, error) {
	out, err := tgtadm(TgtadmShow(controlPort, "target")...)
	if err != nil {
		return nil, err
	}
	targets, err := ParseTgtadm(out)
	if err != nil {
		return nil, err
	}
	if out, err = tgtadm(TgtadmShow(controlPort, "portal")...); err != nil {
		return nil, err
	}
	ports, err := ParseTgtPortals(out)
	if err != nil {
		return nil, err
	}
	for i := range targets {
		targets[i].Ports = ports
	}
	return targets, nil
}
