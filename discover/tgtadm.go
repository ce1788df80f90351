package discover

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"
)

// Tgt asks a running tgtd for its targets. controlPort is tgtadm's -C
// (0: tgtd's default control socket). The program is run directly, never
// through a shell, with a timeout so a hung tgtd cannot stall discovery.
func Tgt(controlPort int) ([]Target, error) {
	args := []string{"--lld", "iscsi", "--op", "show", "--mode", "target"}
	if controlPort != 0 {
		args = append([]string{"-C", strconv.Itoa(controlPort)}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tgtadm", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("tgtadm: %v: %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	return ParseTgtadm(out.Bytes())
}
