// Package guest boots Debian's stock kernel (linux-image-amd64) in a QEMU
// guest that sees this machine's root filesystem read-only over virtio-9p,
// the way virtme-ng does, and runs a script there: the lab's stock-kernel
// tier, for what this machine's kernel lacks (netem, fq, LIO, the kernel
// iSCSI initiator). Whatever the host has installed — tgt, fio, iptables,
// the sanqos binary and test binaries — runs in the guest unchanged,
// against the guest's kernel and its modules.
//
// It must not touch the host's network, block devices or files beyond its
// own work directory: the guest has no network device, its root is
// read-only, and the one writable share is the work directory.
//
// Imports (sanqos): internal/guestenv, lab.
package guest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/guestenv"
	"github.com/sanqos/sanqos/lab"
)

// Options choose the guest.
type Options struct {
	// Kernel is the image to boot; default the newest /boot/vmlinuz-*.
	Kernel string
	// MemoryMiB and CPUs size the guest (default 2048 and 2).
	MemoryMiB, CPUs int
	// Accel is "tcg" (default: software emulation, boots everywhere) or
	// "kvm" (needs /dev/kvm and a CPU the guest runs on; on this
	// workplace's hosts a KVM guest hangs after decompression).
	Accel string
	// Dir is the work directory, shared read-write and mounted at the
	// same path in the guest; default a new temporary directory, removed
	// after the run.
	Dir string
	// Timeout bounds the whole run (default 10 minutes).
	Timeout time.Duration
	// Console receives the guest's serial console (kernel and script
	// output); nil discards it.
	Console io.Writer
	// Systemd boots systemd as PID 1 (Run only): the root is the host's,
	// read-only, under a writable overlay kept in guest memory, so
	// packages install and units change there and vanish at power-off;
	// the script runs as a oneshot service of a boot target of its own
	// (systemd.go).
	Systemd bool
}

// Result is what the guest's script did.
type Result struct {
	ExitCode int
	// Output is the script's stdout and stderr.
	Output string
	// Kernel is the guest's `uname -r`; Accel the accelerator used.
	Kernel, Accel string
	Elapsed       time.Duration
}

// ErrNoGuest is returned (wrapped) when QEMU or a stock kernel is missing:
// scripts/setup.sh installs qemu-system-x86, linux-image-amd64, busybox-static
// and cpio.
var ErrNoGuest = errors.New("no stock-kernel guest: install qemu-system-x86, linux-image-amd64, busybox-static and cpio (scripts/setup.sh)")

// Kernel returns the newest stock kernel image and its version.
func Kernel() (image, version string, err error) {
	imgs, _ := filepath.Glob("/boot/vmlinuz-*")
	sort.Strings(imgs)
	for i := len(imgs) - 1; i >= 0; i-- {
		v := strings.TrimPrefix(filepath.Base(imgs[i]), "vmlinuz-")
		if _, err := os.Stat(filepath.Join("/lib/modules", v, "modules.dep")); err == nil {
			return imgs[i], v, nil
		}
	}
	return "", "", fmt.Errorf("%w: no /boot/vmlinuz-* with modules", ErrNoGuest)
}

// bootModules are what the initramfs loads to mount the host's root:
// virtio-pci and 9p over virtio, with their dependencies from
// modules.dep, in load order.
var bootModules = []string{"virtio_pci", "9pnet_virtio", "9p"}

func moduleOrder(version string, modules []string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/lib/modules", version, "modules.dep"))
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{}
	byName := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		name := strings.TrimSuffix(filepath.Base(mod), filepath.Ext(mod))
		name = strings.TrimSuffix(name, ".ko")
		byName[name] = mod
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(m string) {
		if seen[m] {
			return
		}
		seen[m] = true
		for _, d := range deps[m] {
			visit(d)
		}
		order = append(order, m)
	}
	for _, n := range modules {
		m, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("%w: module %s not in %s's modules.dep", ErrNoGuest, n, version)
		}
		visit(m)
	}
	return order, nil
}

// initScript is the guest's /init: load the boot modules, mount the host's
// root read-only with writable tmpfs where programs expect to write,
// share the work directory, run the script chrooted in the host's root,
// and power off. The exit code and output land in the work directory.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /modules/$(basename $m) || echo "sanqos-guest: insmod $m failed"; done
R=/newroot
[ -e /systemd.sh ] && . /systemd.sh
mkdir -p $R
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot $R
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
for d in /run /tmp /var/tmp /var/lib /var/cache /var/log /root /etc/iscsi; do
	[ -d $R$d ] && mount -t tmpfs tmpfs $R$d
done
mount -t configfs configfs $R/sys/kernel/config 2>/dev/null
mount -t bpf bpf $R/sys/fs/bpf 2>/dev/null
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup 2>/dev/null
# The kernel loads modules on demand (a veth, a qdisc kind) by running
# its modprobe helper in this, the initramfs', root: hand it to the
# host's modprobe inside the shared root.
# The same path, /sbin/modprobe, is the real one inside the shared root,
# where iptables reads the helper's path and runs it itself.
mkdir -p /sbin
printf '#!/bin/busybox sh\nexec /bin/busybox chroot /newroot /sbin/modprobe "$@"\n' > /sbin/modprobe
chmod 755 /sbin/modprobe
echo /sbin/modprobe > /proc/sys/kernel/modprobe
W=$(cat /workdir)
mkdir -p $R$W 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 work $R$W
echo "sanqos-guest: kernel $(uname -r) up"
chroot $R /bin/sh -c "cd $W && HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin sh $W/script.sh > $W/output.log 2>&1; echo \$? > $W/rc.tmp; uname -r > $W/kernel; mv $W/rc.tmp $W/rc"
sync
poweroff -f
`

// buildInitramfs writes a newc cpio archive with busybox, the boot
// modules and /init into dir/initramfs.
func buildInitramfs(dir, version, workdir string, systemd bool) (string, error) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("%w: no busybox", ErrNoGuest)
	}
	if _, err := exec.LookPath("cpio"); err != nil {
		return "", fmt.Errorf("%w: no cpio", ErrNoGuest)
	}
	boot := bootModules
	if systemd {
		boot = append(append([]string(nil), boot...), systemdModules...)
	}
	mods, err := moduleOrder(version, boot)
	if err != nil {
		return "", err
	}
	stage := filepath.Join(dir, "initramfs.d")
	for _, d := range []string{"bin", "modules", "proc", "sys", "dev", "newroot"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return "", err
		}
	}
	copyFile := func(src, dst string, mode os.FileMode) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, mode)
	}
	if err := copyFile(busybox, filepath.Join(stage, "bin", "busybox"), 0o755); err != nil {
		return "", err
	}
	for _, m := range mods {
		if err := copyFile(filepath.Join("/lib/modules", version, m), filepath.Join(stage, "modules", filepath.Base(m)), 0o644); err != nil {
			return "", err
		}
	}
	files := map[string]string{"init": initScript, "modules.order": strings.Join(mods, "\n") + "\n", "workdir": workdir + "\n"}
	if systemd {
		files["systemd.sh"] = systemdBoot
		if err := stageSystemdEtc(filepath.Join(stage, "etc"), workdir); err != nil {
			return "", err
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(stage, name), []byte(body), 0o755); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, "initramfs.cpio")
	cmd := exec.Command("sh", "-c", "find . | cpio -o -H newc --quiet > "+strconv.Quote(out))
	cmd.Dir = stage
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cpio: %v: %s", err, b)
	}
	return out, os.RemoveAll(stage)
}

// qemuArgs resolves the options' defaults and returns QEMU's path and
// arguments for a guest sharing dir, with its initramfs built under boot
// and its serial console on serial (a QEMU character device: "stdio",
// "file:PATH").
func qemuArgs(o *Options, dir, boot, serial string) (string, []string, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", nil, fmt.Errorf("%w: no qemu-system-x86_64", ErrNoGuest)
	}
	image, version := o.Kernel, ""
	if image == "" {
		if image, version, err = Kernel(); err != nil {
			return "", nil, err
		}
		o.Kernel = image
	} else {
		if _, err := os.Stat(image); err != nil {
			return "", nil, fmt.Errorf("%w: kernel %v", ErrNoGuest, err)
		}
		version = strings.TrimPrefix(filepath.Base(image), "vmlinuz-")
	}
	o.MemoryMiB = cmp.Or(o.MemoryMiB, 2048)
	o.CPUs = cmp.Or(o.CPUs, 2)
	o.Accel = cmp.Or(o.Accel, "tcg")
	if o.Accel != "tcg" && o.Accel != "kvm" {
		return "", nil, fmt.Errorf("accelerator %q: want tcg or kvm", o.Accel)
	}
	initrd, err := buildInitramfs(boot, version, dir, o.Systemd)
	if err != nil {
		return "", nil, err
	}
	accel := o.Accel
	if accel == "tcg" {
		accel = "tcg,thread=multi"
	}
	cmdline := "console=ttyS0 panic=-1 rdinit=/init loglevel=4 " + AccelCmdlineKey + "=" + o.Accel
	if o.Systemd {
		cmdline += " " + systemdCmdline
	}
	args := []string{
		"-accel", accel, "-smp", strconv.Itoa(o.CPUs), "-m", strconv.Itoa(o.MemoryMiB),
		"-nographic", "-no-reboot", "-nodefaults", "-serial", serial, "-nic", "none",
		"-kernel", image, "-initrd", initrd,
		// sanqos.accel tells the programs in the guest (the lab's waits,
		// its summaries) what they run on.
		"-append", cmdline,
		"-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
		"-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
		"-fsdev", "local,id=work,path=" + dir + ",security_model=none",
		"-device", "virtio-9p-pci,fsdev=work,mount_tag=work",
	}
	if o.Accel == "kvm" {
		args = append(args, "-cpu", "host")
	} else {
		// TCG's default CPU (qemu64) lacks what binaries built on this
		// host use (fio built from source dies of SIGILL there): emulate
		// every feature TCG can.
		args = append(args, "-cpu", "max")
	}
	return qemu, args, nil
}

// AccelCmdlineKey is the kernel parameter naming the guest's accelerator
// (package guestenv reads it, for the lab and the tests run in the guest).
const AccelCmdlineKey = guestenv.Key

// Run boots the guest, runs script (sh) in it with the work directory as
// its current directory, and returns its exit code and output.
func Run(ctx context.Context, o Options, script string) (Result, error) {
	o.Timeout = cmp.Or(o.Timeout, 10*time.Minute)
	var err error
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sanqos-guest-"); err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(dir)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return Result{}, err
	}
	for _, f := range []string{"rc", "output.log", "kernel"} {
		os.Remove(filepath.Join(dir, f))
	}
	if err := os.WriteFile(filepath.Join(dir, "script.sh"), []byte(script), 0o755); err != nil {
		return Result{}, err
	}
	boot, err := os.MkdirTemp("", "sanqos-guest-boot-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(boot)
	qemu, args, err := qemuArgs(&o, dir, boot, "stdio")
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	var console bytes.Buffer
	w := io.Writer(&console)
	if o.Console != nil {
		w = io.MultiWriter(&console, o.Console)
	}
	cmd.Stdout, cmd.Stderr = w, w
	lab.CloexecInherited() // QEMU may outlive us: not with our caller's lock
	start := time.Now()
	runErr := cmd.Run()
	res := Result{Accel: o.Accel, Elapsed: time.Since(start)}
	rc, err := os.ReadFile(filepath.Join(dir, "rc"))
	if err != nil {
		return res, fmt.Errorf("guest gave no exit code (qemu: %v, after %v)%s; console ends:\n%s", runErr, res.Elapsed.Round(time.Second),
			hangClues(console.String(), filepath.Join(dir, "output.log")), tail(console.String(), 2000))
	}
	res.ExitCode, _ = strconv.Atoi(strings.TrimSpace(string(rc)))
	out, _ := os.ReadFile(filepath.Join(dir, "output.log"))
	k, _ := os.ReadFile(filepath.Join(dir, "kernel"))
	res.Output, res.Kernel = string(out), strings.TrimSpace(string(k))
	return res, nil
}

// hangClues says, for a guest that never finished, what it was doing:
// the command's output so far (a test binary's last "=== RUN") and the
// kernel's first complaint (a soft lockup's or RCU stall's first report
// names the stuck task and its stack; the console's tail has only the
// repeats).
func hangClues(console, outputLog string) string {
	var b strings.Builder
	if out, err := os.ReadFile(outputLog); err == nil && len(out) > 0 {
		fmt.Fprintf(&b, "; its output ends:\n%s\n", tail(string(out), 1000))
	}
	first := -1
	for _, mark := range []string{"BUG:", "rcu: INFO", "WARNING:"} {
		if i := strings.Index(console, mark); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		first = strings.LastIndexByte(console[:first], '\n') + 1 // the whole line, with its timestamp
		fmt.Fprintf(&b, "; the kernel's first complaint:\n%s\n", console[first:min(len(console), first+3000)])
	}
	return b.String()
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
