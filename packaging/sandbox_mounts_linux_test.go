package packaging

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The sandbox's mount namespace: ProtectSystem=strict, the read-only,
// inaccessible, private (tmpfs) and writable paths of the unit, applied in
// a private mount namespace by remounting what /proc/self/mountinfo
// lists. It is its own file because it is the part
// of the helper that reads and rewrites the mount table; the seccomp
// filters are in sandbox_seccomp_linux_test.go, the process limits stay
// in sandbox_linux_test.go.

// mountPoints lists the mount points at or below root, from
// /proc/self/mountinfo (octal escapes undone), outermost first.
func mountPoints(root string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == root || root == "/" || strings.HasPrefix(p, root+"/") {
			out = append(out, p)
		}
	}
	return out, nil
}

func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountFlags are the per-mount flags of the mount at p (statfs's ST_*
// flags as MS_* ones), but read-only, which the caller sets.
func mountFlags(p string) (uintptr, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return 0, err
	}
	var fl uintptr
	for stFlag, ms := range map[int64]uintptr{
		unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME,
	} {
		if st.Flags&stFlag != 0 {
			fl |= ms
		}
	}
	return fl, nil
}

// remountRO makes the mount at p read-only, keeping its other flags.
func remountRO(p string) error {
	fl, err := mountFlags(p)
	if err != nil {
		return err
	}
	return unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|fl, "")
}

// remountRW makes the (bind) mount at p writable again, keeping its flags.
func remountRW(p string) error {
	fl, err := mountFlags(p)
	if err != nil {
		return err
	}
	return unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|fl, "")
}

func under(p string, roots ...string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// mounts builds the sandbox's mount namespace: / private, read-only where
// the unit says, its writable paths, a private /tmp, the home directories
// hidden. It is one function because the mounts must happen in this
// order, each over the one before.
func (s *sandbox) mounts() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	roAt := func(root string, skip ...string) error {
		mps, err := mountPoints(root)
		if err != nil {
			return err
		}
		for _, p := range mps {
			if under(p, skip...) {
				continue
			}
			if err := remountRO(p); err != nil && !os.IsNotExist(err) && err != unix.EACCES {
				return fmt.Errorf("read-only %s: %w", p, err)
			}
		}
		return nil
	}
	if s.ReadOnlyAll {
		if err := roAt("/", "/dev", "/proc", "/sys"); err != nil {
			return err
		}
	}
	for _, p := range s.ReadOnly {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		mps, err := mountPoints(p)
		if err != nil {
			return err
		}
		if len(mps) == 0 || mps[0] != p {
			// Not a mount point: bind it onto itself first.
			if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind %s: %w", p, err)
			}
		}
		if err := roAt(p); err != nil {
			return err
		}
	}
	for _, p := range s.Inaccessible {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue // absent, or a symlink into a directory handled by its own entry
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=000,size=4k"); err != nil {
			return fmt.Errorf("inaccessible %s: %w", p, err)
		}
		if err := remountRO(p); err != nil {
			return fmt.Errorf("inaccessible %s: %w", p, err)
		}
	}
	for _, p := range s.Tmpfs {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("private %s: %w", p, err)
		}
	}
	for _, p := range s.ReadWrite {
		p, optional := strings.CutPrefix(p, "-")
		if _, err := os.Stat(p); err != nil {
			if optional {
				continue
			}
			return fmt.Errorf("writable %s: %w", p, err)
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", p, err)
		}
		if err := remountRW(p); err != nil {
			return fmt.Errorf("writable %s: %w", p, err)
		}
	}
	return nil
}
