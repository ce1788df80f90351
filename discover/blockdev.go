package discover

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Resolver maps a LUN's backing store path to block devices through sysfs.
// It only reads.
type Resolver struct {
	// SysRoot is the sysfs mount ("/sys" when empty); tests point it at a
	// fixture tree.
	SysRoot string
	// Stat returns the device numbers of path, following symlinks; nil
	// uses stat(2). Tests inject it because a fixture cannot hold device
	// nodes without root.
	Stat func(path string) (FileDev, error)
}

// FileDev is what Resolver needs from stat(2).
type FileDev struct {
	Block bool   // path is a block device node
	Rdev  uint64 // device number of the node, when Block
	Dev   uint64 // device number of the filesystem holding path
}

// BlockDev is where a backing store's I/O is measured and what it shares.
type BlockDev struct {
	// Name is the sysfs/diskstats name whose line measures this backing
	// store alone ("loop3", "dm-2", "sdb"); "" for a plain file not behind
	// a loop device (only its filesystem's device measures it, mixed with
	// everything else there).
	Name string
	// Pool is the set of lowest devices underneath: slaves/ followed down
	// to devices without slaves; for a loop device, the pool of the device
	// holding its backing file. A filesystem without a block device (FUSE,
	// tmpfs) is named "dev-<major>:<minor>". Backing stores with
	// overlapping pools share a resource.
	Pool []string
}

// ErrNotFound is wrapped when a path maps to no known device.
var ErrNotFound = errors.New("discover: no block device")

func (r *Resolver) sys(parts ...string) string {
	root := r.SysRoot
	root = cmp.Or(root, "/sys")
	return filepath.Join(append([]string{root}, parts...)...)
}

func (r *Resolver) stat(path string) (FileDev, error) {
	if r.Stat != nil {
		return r.Stat(path)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return FileDev{}, err
	}
	return FileDev{
		Block: st.Mode&syscall.S_IFMT == syscall.S_IFBLK,
		Rdev:  uint64(st.Rdev),
		Dev:   uint64(st.Dev),
	}, nil
}

// nameOf returns the sysfs name of block device number dev, via
// /sys/dev/block/<major>:<minor> → …/block/<name>.
func (r *Resolver) nameOf(dev uint64) (string, bool) {
	link := r.sys("dev", "block", fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev)))
	dst, err := os.Readlink(link)
	if err != nil {
		return "", false
	}
	return filepath.Base(dst), true
}

// Resolve maps a backing store path (a device node, a symlink to one such
// as /dev/vg/lv or /dev/mapper/x, or a regular file) to its BlockDev.
func (r *Resolver) Resolve(path string) (BlockDev, error) {
	st, err := r.stat(path)
	if err != nil {
		return BlockDev{}, fmt.Errorf("discover: backing store %s: %w", path, err)
	}
	if st.Block {
		name, ok := r.nameOf(st.Rdev)
		if !ok {
			return BlockDev{}, fmt.Errorf("%w: %s is device %d:%d, unknown to sysfs", ErrNotFound, path, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		return BlockDev{Name: name, Pool: r.pool(name, 0)}, nil
	}
	loops, err := r.loopsBacking(path)
	if err != nil {
		return BlockDev{}, err
	}
	if len(loops) > 0 {
		// Several loop devices on one file would be odd; the lowest-numbered
		// is as good a witness as any and keeps the choice stable.
		return BlockDev{Name: loops[0], Pool: r.pool(loops[0], 0)}, nil
	}
	return BlockDev{Pool: r.fsPool(st.Dev, 0)}, nil
}

// maxDepth bounds slave/loop chains so a cyclic fixture cannot recurse
// forever; real stacks (loop on md on dm on sd) are a handful deep.
const maxDepth = 16

// pool returns the lowest devices under name.
func (r *Resolver) pool(name string, depth int) []string {
	if depth > maxDepth {
		return []string{name}
	}
	if bf, err := os.ReadFile(r.sys("class", "block", name, "loop", "backing_file")); err == nil {
		if st, err := r.stat(cleanBacking(string(bf))); err == nil {
			if st.Block {
				if n, ok := r.nameOf(st.Rdev); ok {
					return r.pool(n, depth+1)
				}
			}
			return r.fsPool(st.Dev, depth+1)
		}
		// backing_file is the path as seen from the root of the mount
		// namespace that attached the loop device: from another one
		// (ip netns exec makes its own) under a chroot it does not
		// resolve (the stock-kernel guest's lab: /newroot/run/…). The
		// loop driver's own record of the file's device does.
		if dev, ok := r.loopBackingDev(name); ok {
			return r.fsPool(dev, depth+1)
		}
		return []string{name}
	}
	slaves, err := os.ReadDir(r.sys("class", "block", name, "slaves"))
	if err != nil || len(slaves) == 0 {
		return []string{r.whole(name)}
	}
	var out []string
	for _, s := range slaves {
		for _, p := range r.pool(s.Name(), depth+1) {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// whole maps a partition to its disk: two LUNs on sda1 and sda2 contend for
// the same spindles. A partition's sysfs directory sits inside its disk's
// and has a "partition" attribute.
func (r *Resolver) whole(name string) string {
	if _, err := os.Stat(r.sys("class", "block", name, "partition")); err != nil {
		return name
	}
	dst, err := filepath.EvalSymlinks(r.sys("class", "block", name))
	if err != nil {
		return name
	}
	return filepath.Base(filepath.Dir(dst))
}

func (r *Resolver) fsPool(dev uint64, depth int) []string {
	if n, ok := r.nameOf(dev); ok {
		return r.pool(n, depth+1)
	}
	return []string{fmt.Sprintf("dev-%d:%d", unix.Major(dev), unix.Minor(dev))}
}

// loopsBacking returns the loop devices whose backing_file is path.
func (r *Resolver) loopsBacking(path string) ([]string, error) {
	want := filepath.Clean(path)
	if abs, err := filepath.EvalSymlinks(want); err == nil {
		want = abs
	}
	files, err := filepath.Glob(r.sys("block", "loop*", "loop", "backing_file"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if got := cleanBacking(string(b)); got == want || got == filepath.Clean(path) {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	sort.Slice(out, func(i, j int) bool { return loopLess(out[i], out[j]) })
	return out, nil
}

// cleanBacking strips the newline and the " (deleted)" suffix the kernel
// appends when the backing file was unlinked.
func cleanBacking(s string) string {
	s = strings.TrimRight(s, "\n")
	return filepath.Clean(strings.TrimSuffix(s, " (deleted)"))
}

func loopLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b) // loop2 < loop10
	}
	return a < b
}

// loopBackingDev asks the loop driver (LOOP_GET_STATUS64) for the device
// of loop device name's backing file; only on the real system (not with
// a test's Stat or sysfs root).
func (r *Resolver) loopBackingDev(name string) (uint64, bool) {
	if r.Stat != nil || (r.SysRoot != "" && r.SysRoot != "/sys") {
		return 0, false
	}
	f, err := os.Open("/dev/" + name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil {
		return 0, false
	}
	return info.Device, true
}
