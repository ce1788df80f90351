package lab

import (
	"os"
	"path/filepath"
	"strings"
)

// attachLoop binds file to a free loop device with direct I/O, so the loop
// device adds no page cache of its own between tgtd and the resource.
func attachLoop(file string) (string, error) {
	out, err := Exec("losetup", "--find", "--show", "--direct-io=on", file)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(strings.TrimSpace(out), "/dev/"), nil
}

// ourLoops finds loop devices whose backing file lies under one of the
// lab's directories — the label that lets Down clean up after a crash.
func ourLoops() []string {
	ms, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var loops []string
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		f := strings.TrimSpace(string(b))
		if strings.HasPrefix(f, StateDir+"/") || strings.HasPrefix(f, StoreDir+"/") || strings.HasPrefix(f, RealDir+"/") {
			loops = append(loops, filepath.Base(filepath.Dir(filepath.Dir(m))))
		}
	}
	return loops
}

func detachLoops(loops []string) []error {
	var errs []error
	for _, l := range loops {
		if _, err := Exec("losetup", "-d", "/dev/"+l); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// ourMounts lists FUSE mounts under StateDir.
func ourMounts() []string {
	b, _ := os.ReadFile("/proc/self/mounts")
	var ms []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], StateDir+"/") {
			ms = append(ms, f[1])
		}
	}
	return ms
}
