package guest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// A persistent guest stays up between commands: QEMU runs in the
// background (its own session, so it outlives the command that started
// it) and the guest's script is a control loop on the shared work
// directory. A command is a shell script the host drops into cmd/ID.sh;
// the loop runs it in its own session and writes ID.log (output, as it
// comes) and ID.rc (exit code, last); ID.cancel sends the command's
// process group SIGTERM (not SIGINT: a background job of a non-interactive
// shell ignores that; the wrapper that writes ID.rc traps it, so it
// outlives the command); a file named stop ends the loop and powers the
// guest off. Files over the 9p share need no network device, and the
// guest's share is uncached, so each side sees the other's writes at
// once.

// Guest is a running persistent guest.
type Guest struct {
	Dir  string
	Info Info
}

// Info is saved as guest.json in the work directory.
type Info struct {
	PID     int       `json:"pid"`
	Kernel  string    `json:"kernel"` // the booted image; Release once up
	Release string    `json:"release"`
	Accel   string    `json:"accel"`
	Memory  int       `json:"memory_mib"`
	CPUs    int       `json:"cpus"`
	Started time.Time `json:"started"`
}

// ErrNotRunning says no persistent guest runs in the directory.
var ErrNotRunning = errors.New("no stock-kernel guest is running")

// controlLoop is the persistent guest's script (run by /init, chrooted in
// the host's root, in the work directory). It polls once a second: under
// TCG an idle guest polling every 0.3 s took 27 % of a host core, at 1 s
// 10 %, and a command waits at most a second more to start.
const controlLoop = `mkdir -p cmd
uname -r > ready.tmp && mv ready.tmp ready
while [ ! -e stop ]; do
	for f in cmd/*.sh; do
		[ -e "$f" ] || continue
		id=${f%.sh}
		mv "$f" "$id.run"
		setsid sh -c 'echo $$ > "$1.pid"; trap : TERM; sh "$1.run" > "$1.log" 2>&1; echo $? > "$1.rc.tmp"; mv "$1.rc.tmp" "$1.rc"' sh "$id" < /dev/null > /dev/null 2>&1 &
	done
	for c in cmd/*.cancel; do
		[ -e "$c" ] || continue
		id=${c%.cancel}
		rm -f "$c"
		[ -e "$id.pid" ] && /bin/kill -TERM -- "-$(cat "$id.pid")" 2>/dev/null
	done
	sleep 1
done
`

// Start boots a persistent guest in o.Dir (created if missing; files the
// caller put there, such as a binary to run, stay) and waits until its
// control loop answers, at most o.Timeout (default 3 minutes). QEMU's
// serial console goes to console.log there.
func Start(o Options) (*Guest, error) {
	if o.Dir == "" {
		return nil, errors.New("a persistent guest needs a work directory")
	}
	o.Timeout = cmp.Or(o.Timeout, 3*time.Minute)
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if g, err := Open(dir); err == nil {
		return nil, fmt.Errorf("a guest already runs in %s (pid %d)", dir, g.Info.PID)
	}
	for _, d := range []string{dir, filepath.Join(dir, "cmd"), filepath.Join(dir, "boot")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	for _, f := range []string{"ready", "stop", "rc", "kernel", "output.log", "console.log"} {
		os.Remove(filepath.Join(dir, f))
	}
	if err := os.WriteFile(filepath.Join(dir, "script.sh"), []byte(controlLoop), 0o755); err != nil {
		return nil, err
	}
	console := filepath.Join(dir, "console.log")
	qemu, args, err := qemuArgs(&o, dir, filepath.Join(dir, "boot"), "file:"+console)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(qemu, args...)
	qlog, err := os.Create(filepath.Join(dir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	defer qlog.Close()
	cmd.Stdout, cmd.Stderr = qlog, qlog
	// Its own session: QEMU outlives this command and a Ctrl-C of it, and
	// must not hold what this command inherited (`flock LOCK cmd`'s lock).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	lab.CloexecInherited()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// Reap it if it ends while this process lives (a test that starts and
	// stops a guest); otherwise init does.
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	g := &Guest{Dir: dir, Info: Info{PID: cmd.Process.Pid, Kernel: o.Kernel, Accel: o.Accel, Memory: o.MemoryMiB, CPUs: o.CPUs, Started: time.Now().UTC()}}
	if err := g.save(); err != nil {
		g.kill()
		return nil, err
	}
	deadline := time.Now().Add(o.Timeout)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "ready")); err == nil {
			g.Info.Release = strings.TrimSpace(string(b))
			break
		}
		dead := false
		select {
		case <-exited:
			dead = true
		default:
		}
		if dead || time.Now().After(deadline) {
			why := "QEMU exited"
			if !dead {
				why = fmt.Sprintf("no answer after %v", o.Timeout)
			}
			g.kill()
			return nil, fmt.Errorf("stock-kernel guest did not come up (%s); QEMU said: %s; console ends:\n%s", why,
				strings.TrimSpace(readTail(filepath.Join(dir, "qemu.log"), 500)), readTail(console, 2000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	os.RemoveAll(filepath.Join(dir, "boot")) // QEMU has read the initramfs
	return g, g.save()
}

// Open finds the persistent guest running in dir; ErrNotRunning (wrapped)
// if there is none.
func Open(dir string) (*Guest, error) {
	b, err := os.ReadFile(filepath.Join(dir, "guest.json"))
	if err != nil {
		return nil, fmt.Errorf("%w in %s", ErrNotRunning, dir)
	}
	g := &Guest{Dir: dir}
	if err := json.Unmarshal(b, &g.Info); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "guest.json"), err)
	}
	if !g.alive() {
		return nil, fmt.Errorf("%w in %s (QEMU pid %d is gone)", ErrNotRunning, dir, g.Info.PID)
	}
	return g, nil
}

func (g *Guest) save() error {
	b, err := json.MarshalIndent(g.Info, "", "  ")
	if err != nil {
		return err
	}
	return lab.WriteAtomic(filepath.Join(g.Dir, "guest.json"), b, 0o600)
}

// alive reports whether the guest's QEMU still runs: the pid exists, is
// not a zombie and is a QEMU sharing this guest's directory.
func (g *Guest) alive() bool { return isGuestQEMU(g.Info.PID, g.Dir) }

func isGuestQEMU(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv := strings.Split(string(cl), "\x00")
	return len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "qemu-system") && strings.Contains(string(cl), "path="+dir+",")
}

// kill ends QEMU at once.
func (g *Guest) kill() {
	if g.alive() {
		syscall.Kill(g.Info.PID, syscall.SIGKILL)
	}
	g.waitGone(5 * time.Second)
}

func (g *Guest) waitGone(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for g.alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// Console is the tail of the guest's serial console.
func (g *Guest) Console(n int) string { return readTail(filepath.Join(g.Dir, "console.log"), n) }

func readTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), n)
}

// Running lists the commands still running in the guest (their scripts'
// first lines).
func (g *Guest) Running() []string {
	runs, _ := filepath.Glob(filepath.Join(g.Dir, "cmd", "*.run"))
	sort.Strings(runs)
	var out []string
	for _, r := range runs {
		id := strings.TrimSuffix(r, ".run")
		if _, err := os.Stat(id + ".rc"); err == nil {
			continue
		}
		b, _ := os.ReadFile(r)
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		out = append(out, line)
	}
	return out
}

// Exec runs script (sh) in the guest, in the work directory, copying its
// output (stdout and stderr together) to out as it comes, and returns its
// exit code. When ctx ends the command gets SIGTERM (its process group)
// and Exec waits up to a minute more for it to finish.
func (g *Guest) Exec(ctx context.Context, script string, out io.Writer) (int, error) {
	out = cmp.Or(out, io.Discard)
	id := filepath.Join(g.Dir, "cmd", strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := os.WriteFile(id+".tmp", []byte(script), 0o644); err != nil {
		return -1, err
	}
	if err := os.Rename(id+".tmp", id+".sh"); err != nil {
		return -1, err
	}
	defer func() {
		for _, s := range []string{".sh", ".run", ".log", ".pid", ".rc", ".cancel"} {
			os.Remove(id + s)
		}
	}()
	var off int64
	copyLog := func() {
		f, err := os.Open(id + ".log")
		if err != nil {
			return
		}
		defer f.Close()
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return
		}
		n, _ := io.Copy(out, f)
		off += n
	}
	var giveUp time.Time
	for {
		if rc, err := os.ReadFile(id + ".rc"); err == nil {
			copyLog()
			code, err := strconv.Atoi(strings.TrimSpace(string(rc)))
			if err != nil {
				return -1, fmt.Errorf("guest command's exit code %q: %w", rc, err)
			}
			if ctx.Err() != nil {
				return code, ctx.Err()
			}
			return code, nil
		}
		copyLog()
		if !g.alive() {
			return -1, fmt.Errorf("the stock-kernel guest died (QEMU pid %d); console ends:\n%s", g.Info.PID, g.Console(2000))
		}
		if ctx.Err() != nil {
			if giveUp.IsZero() {
				os.WriteFile(id+".cancel", nil, 0o644)
				giveUp = time.Now().Add(time.Minute)
			} else if time.Now().After(giveUp) {
				return -1, fmt.Errorf("%w; the guest's command did not end on SIGTERM", ctx.Err())
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop powers the guest off (its control loop ends, /init syncs and powers
// off), kills QEMU if it has not exited within timeout, and removes the
// work directory.
func (g *Guest) Stop(timeout time.Duration) error {
	if g.alive() {
		os.WriteFile(filepath.Join(g.Dir, "stop"), nil, 0o644)
		if !g.waitGone(timeout) {
			syscall.Kill(g.Info.PID, syscall.SIGTERM)
			if !g.waitGone(5 * time.Second) {
				g.kill()
			}
		}
	}
	if g.alive() {
		return fmt.Errorf("QEMU pid %d would not exit", g.Info.PID)
	}
	return os.RemoveAll(g.Dir)
}

// Remove clears what a guest left in dir — a QEMU still running there, the
// directory — whether or not it is healthy.
func Remove(dir string, timeout time.Duration) error {
	g := &Guest{Dir: dir}
	if b, err := os.ReadFile(filepath.Join(dir, "guest.json")); err == nil {
		json.Unmarshal(b, &g.Info)
	}
	return g.Stop(timeout)
}

// Leftovers lists what a guest in dir left on this machine: a QEMU that
// shares dir, the directory itself.
func Leftovers(dir string) []string {
	var l []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isGuestQEMU(pid, dir) {
			l = append(l, fmt.Sprintf("qemu pid %d", pid))
		}
	}
	if _, err := os.Stat(dir); err == nil {
		l = append(l, "dir "+dir)
	}
	return l
}
