package guest

import (
	"fmt"
	"os"
	"path/filepath"
)

// The systemd guest (Options.Systemd): systemd runs as PID 1 on the
// stock kernel, so units are started, reloaded, stopped and sandboxed by
// systemd itself rather than rebuilt by hand (packaging/'s tests do that
// on hosts where systemd is not PID 1, this one and CI included).
//
// The initramfs mounts the host's root over 9p read-only as the lower
// layer of an overlayfs whose upper layer is a tmpfs, so dpkg can install
// into it and everything written is gone at power-off; tmpfs over /tmp,
// /var/tmp, /var/log and /root hides the host's files there (the host's
// journal would otherwise be copied up and appended to); the work
// directory is shared read-write at its own path, as in the other mode.
// It adds the units below to the overlay's /etc and switch_roots into it,
// exec'ing /lib/systemd/systemd. The kernel command line's systemd.unit
// boots sanqos-guest.target, which needs only sysinit.target and the
// script's oneshot service; that service powers the guest off when the
// script ends, whatever its exit code.

// systemdModules are loaded by the initramfs besides bootModules.
var systemdModules = []string{"overlay"}

// systemdCmdline is added to the kernel command line. fstab=no: the
// host's /etc/fstab names the host's disks, which the guest has not.
// systemd.firstboot=off: never prompt on the console.
const systemdCmdline = "systemd.unit=sanqos-guest.target fstab=no systemd.firstboot=off"

// systemdBoot is sourced by /init (with R, the new root's mount point,
// set and the boot modules loaded) when the guest boots systemd; it does
// not return.
const systemdBoot = `mkdir -p /lower /upper $R
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /lower
mount -t tmpfs -o mode=0755 upper /upper
mkdir -p /upper/data /upper/work
if ! mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay $R; then
	echo "sanqos-guest: cannot mount the overlay root"
	poweroff -f
fi
# A host that is a container marks it there; systemd would then take
# itself for a container's init and read its arguments (systemd.unit)
# from its own command line, not the kernel's.
rm -f $R/.dockerenv $R/run/.containerenv
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=1777 tmpfs $R/var/tmp
mount -t tmpfs -o mode=0755 tmpfs $R/var/log
mount -t tmpfs -o mode=0700 tmpfs $R/root
W=$(cat /workdir)
mkdir -p $R$W
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 work $R$W
cp -a /etc/. $R/etc/
echo "sanqos-guest: kernel $(uname -r) up, starting systemd"
umount /proc /sys /dev
exec switch_root $R /lib/systemd/systemd
`

// systemdMasked are the units the guest masks: what needs hardware,
// a network or a console login the guest has not (it has no NIC and no
// disk), what would prompt, and tmp.mount, which would hide a work
// directory under /tmp. udev is masked too: nothing the guest runs waits
// for a device unit, and its coldplug costs seconds under TCG.
var systemdMasked = []string{
	"getty@.service", "serial-getty@.service", "console-getty.service", "container-getty@.service",
	"systemd-firstboot.service",
	"systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
	"systemd-udev-trigger.service", "systemd-udev-settle.service",
	"networking.service", "ifupdown-wait-online.service",
	"systemd-networkd.service", "systemd-networkd.socket", "systemd-networkd-wait-online.service",
	"NetworkManager.service", "NetworkManager-wait-online.service",
	"systemd-timesyncd.service", "systemd-pstore.service",
	"open-iscsi.service", "iscsid.service", "iscsid.socket",
	"tmp.mount",
}

const guestTarget = `[Unit]
Description=sanqos stock-kernel guest: run the script, then power off
Requires=sysinit.target sanqos-guest.service
After=sysinit.target sanqos-guest.service
AllowIsolate=yes
`

const guestService = `[Unit]
Description=sanqos stock-kernel guest: the script
After=sysinit.target
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
TimeoutStartSec=infinity
Environment=HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=/bin/sh /etc/sanqos-guest/run.sh
`

// stageSystemdEtc writes, under etc (the initramfs' /etc, copied over
// the overlay's), the boot target, the script's service and its runner,
// the masks, and a tmpfiles.d override: Debian's tmp.conf empties /tmp
// at boot, where the work directory may be mounted.
func stageSystemdEtc(etc, workdir string) error {
	units := filepath.Join(etc, "systemd", "system")
	for _, d := range []string{units, filepath.Join(etc, "tmpfiles.d"), filepath.Join(etc, "sanqos-guest")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	w := Quote(workdir)
	run := fmt.Sprintf("cd %[1]s || exit 1\nsh %[1]s/script.sh > %[1]s/output.log 2>&1\necho $? > %[1]s/rc.tmp\nuname -r > %[1]s/kernel\nmv %[1]s/rc.tmp %[1]s/rc\nsync\n", w)
	files := map[string]string{
		filepath.Join(units, "sanqos-guest.target"):  guestTarget,
		filepath.Join(units, "sanqos-guest.service"): guestService,
		filepath.Join(etc, "sanqos-guest", "run.sh"): run,
		filepath.Join(etc, "tmpfiles.d", "tmp.conf"): "# sanqos guest: /tmp is a fresh tmpfs; keep the work directory\n",
	}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, u := range systemdMasked {
		if err := os.Symlink("/dev/null", filepath.Join(units, u)); err != nil {
			return err
		}
	}
	return nil
}
