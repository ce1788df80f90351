package experiments

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// The reliability experiment's faults on the target and the initiators:
// tgtd restarted, an initiator's address changed, a LUN and a device
// removed under the agent.

// faultTgtdRestart kills tgtd under full load; lab serve restarts it and
// restores the targets. fio's libiscsi reconnects but reports the new
// target's UNIT ATTENTION (bus reset) as an I/O error, where a kernel
// initiator would retry the command, so the load is started again after
// the restart: the agent must still be running and throttle it.
func faultTgtdRestart(r *runner) Fault {
	f := Fault{Name: "tgtd killed and restarted under load", Expect: "agent keeps running, rediscovers, throttles the load started after the restart; ≤ 3 warnings", Data: "n/a (the target crashed)"}
	a, err := r.startAutonomic("tgtd")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 8 * time.Second
	p := r.controlledLoad("tgtd-kill", "tgtd killed at 4 s", length, lab.Hosts[1:], 4)
	p.Events = []lab.Event{{At: 4 * time.Second, Name: "kill tgtd", Do: func() error {
		pids := lab.FindProcs(lab.IsOurTgtd)
		if len(pids) == 0 {
			return errors.New("no tgtd to kill")
		}
		lab.KillAll(pids)
		return nil
	}}}
	killed, err := f.run(r, p)
	fioNote := "fio ran through the restart"
	if err != nil {
		if killed == nil || killed.FioErr == nil {
			return failed(f, err)
		}
		fioNote = "fio (libiscsi) failed on the UNIT ATTENTION after reconnecting"
	}
	if werr := lab.WaitFor("tgtd back", 15*time.Second, lab.TgtReady); werr != nil {
		return failed(f, werr)
	}
	p = r.controlledLoad("tgtd-after", "load after the restart", length, lab.Hosts[1:], 4)
	seen, err := f.runSampled(r, a, p)
	if err != nil {
		return failed(f, err)
	}
	after := seen.count(0, nil)
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("%s; agent alive: %v; after the restart it throttled in %d of %d samples", fioNote, a.Alive(), after, len(seen))
	if len(seen) == 0 {
		f.Result = fmt.Sprintf("%s; agent alive: %v; after the restart it throttled in no sample", fioNote, a.Alive())
	}
	f.Pass = a.Alive() && after > 0 && f.LogLines <= 3
	return f
}

// faultNewAddress moves an initiator to a new address between two runs:
// its sessions end, new ones come from the new address. The agent must
// throttle the new address and never the old one once discovery has seen
// the change.
func faultNewAddress(r *runner) Fault {
	f := Fault{Name: "initiator reconnects from a new address", Expect: "old address no longer throttled after rediscovery (1 s); new one throttled", Data: "n/a"}
	a, err := r.startAutonomic("addr")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 8 * time.Second
	if _, err := r.Run(r.controlledLoad("addr-before", "b4 at its address", length, lab.Hosts[1:], 4), 0); err != nil {
		return failed(f, err)
	}
	old := lab.HostAddr("b4")
	moved := netip.AddrFrom4([4]byte{old.As4()[0], old.As4()[1], old.As4()[2], old.As4()[3] + 10})
	if err := moveAddr("b4", old, moved); err != nil {
		return failed(f, err)
	}
	defer moveAddr("b4", moved, old)
	p := r.controlledLoad("addr-after", "b4 at a new address", length, lab.Hosts[1:], 4)
	seen, err := f.runSampled(r, a, p)
	if err != nil {
		return failed(f, err)
	}
	oldSeen, newSeen := seen.count(1500*time.Millisecond, is(old)), seen.count(0, is(moved))
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("%v throttled in %d samples after 1.5 s; %v (new) in %d", old, oldSeen, moved, newSeen)
	f.Pass = oldSeen == 0 && newSeen > 0 && a.Alive()
	return f
}

// moveAddr replaces host's address. Delete first: deleting a primary
// address also deletes its secondaries (unless promote_secondaries is on).
func moveAddr(host string, from, to netip.Addr) error {
	if _, err := lab.Exec("ip", "-n", host, "addr", "del", from.String()+"/24", "dev", "eth0"); err != nil {
		return err
	}
	_, err := lab.Exec("ip", "-n", host, "addr", "add", to.String()+"/24", "dev", "eth0")
	return err
}

// faultLUNRemoved deletes a throttled consumer's LUN. tgt refuses while
// the LUN has a session ("this logical unit is still active"), so it goes
// right after the consumer's session ends, while the agent still delays
// the consumer; then the others run on.
func faultLUNRemoved(r *runner) Fault {
	f := Fault{Name: "LUN removed while its consumer is throttled", Expect: "the consumer is released and never throttled again; agent keeps running", Data: "n/a"}
	a, err := r.startAutonomic("lun")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 8 * time.Second
	if _, err := r.Run(r.controlledLoad("lun-before", "all writers", length, lab.Hosts[1:], 4), 0); err != nil {
		return failed(f, err)
	}
	lun := r.LUN("b5")
	m, err := a.List()
	if err != nil {
		return failed(f, err)
	}
	_, wasThrottled := m[lab.HostAddr("b5")]
	if _, err := lab.Tgtadm("--op", "delete", "--mode", "logicalunit", "--tid", strconv.Itoa(r.Res.TID), "--lun", strconv.Itoa(lun.Number)); err != nil {
		return failed(f, err)
	}
	flags, _ := lab.DirectIOFlags(lun.Backing)
	defer lab.Tgtadm(append([]string{"--op", "new", "--mode", "logicalunit", "--tid", strconv.Itoa(r.Res.TID), "--lun", strconv.Itoa(lun.Number),
		"--backing-store", lun.Backing}, flags...)...)
	p := r.controlledLoad("lun-after", "b5's LUN removed", length, []string{"b3", "b4"}, 6)
	seen, err := f.runSampled(r, a, p)
	if err != nil {
		return failed(f, err)
	}
	b5, others := seen.count(1500*time.Millisecond, is(lab.HostAddr("b5"))), seen.count(0, not(lab.HostAddr("b5")))
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("b5 throttled when its LUN went: %v; b5 throttled in %d samples after 1.5 s; b3/b4 in %d", wasThrottled, b5, others)
	f.Pass = b5 == 0 && others > 0 && a.Alive()
	return f
}

// faultDeviceGone makes a device of a statically configured resource
// disappear from /proc/diskstats mid-run.
func faultDeviceGone(r *runner) Fault {
	f := Fault{Name: "a resource's device disappears", Expect: "agent keeps running and throttling on the remaining devices; ≤ 1 warning", Data: "n/a"}
	img := filepath.Join(lab.StoreDir, "vanishing.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		return failed(f, err)
	}
	defer os.Remove(img)
	dev, err := lab.Exec("losetup", "--find", "--show", img)
	if err != nil {
		return failed(f, err)
	}
	dev = strings.TrimSpace(dev)
	defer lab.Exec("losetup", "-d", dev)
	cfg := filepath.Join(r.Dir, "agent-device.yaml")
	y := "backend: delayline\nhttp: 127.0.0.1:9311\nthreshold: 15ms\n" + r.staticResourceYAML(filepath.Base(dev))
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		return failed(f, err)
	}
	a, err := lab.StartAgent("delayline", r.Dir, "--config", cfg)
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 10 * time.Second
	p := r.controlledLoad("device-gone", "extra device detached at 3 s", length, lab.Hosts[1:], 4)
	p.Events = []lab.Event{{At: 3 * time.Second, Name: "detach device", Do: func() error {
		_, err := lab.Exec("losetup", "-d", dev)
		return err
	}}}
	seen, err := f.runSampled(r, a, p)
	if err != nil {
		return failed(f, err)
	}
	after := seen.count(5*time.Second, nil)
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("%s detached at 3 s; agent alive: %v; throttling in %d samples after 5 s", filepath.Base(dev), a.Alive(), after)
	f.Pass = a.Alive() && after > 0 && f.LogLines <= 1
	return f
}
