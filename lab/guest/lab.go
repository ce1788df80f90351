package guest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// The lab in the guest (`sanqos-lab lab up --kernel debian`): a persistent
// guest in LabDir runs `sanqos-lab lab up` — namespaces, tgtd, the modelled
// disk, everything the host's lab has — on the stock kernel, and later
// `sanqos-lab lab run` invocations on the host run their experiment there and
// copy its results back. This package does not import the lab: it runs
// the sanqos-lab binary (and sanqos, which it starts agents from), copied
// into the work directory (a binary under /tmp or /root would be hidden
// by the guest's tmpfs).

// LabDir is the lab guest's work directory on the host: guest.json (QEMU's
// pid), console.log, the command queue, bin/HASH/sanqos-lab and sanqos,
// results in transit.
const LabDir = "/run/sanqos-guest"

// LabDirectory is LabDir, or $SANQOS_GUEST_DIR where set: a test's guest
// lab must not meet the one a person has up on the same machine.
func LabDirectory() string { return cmp.Or(os.Getenv("SANQOS_GUEST_DIR"), LabDir) }

// Quote makes a shell word of each argument.
func Quote(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// InstallLab puts the lab binary (as sanqos-lab) and the product binary
// it runs agents from (as sanqos, beside it: lab.SanqosExecutable) in
// dir/bin under a directory named after their content, bin/HASH, unless
// it is there, and records it as the current one. A file there is never
// replaced: a guest that ran an earlier build over 9p would otherwise
// exec it through stale cached pages (seen: a rebuilt sanqos died in the
// guest of "panic on system stack").
func InstallLab(dir, labBinary, sanqosBinary string) error {
	names, srcs := []string{"sanqos-lab", "sanqos"}, []string{labBinary, sanqosBinary}
	contents := make([][]byte, len(srcs))
	h := sha256.New()
	for i, src := range srcs {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		contents[i] = b
		h.Write(b)
	}
	name := hex.EncodeToString(h.Sum(nil)[:6])
	bin := filepath.Join(dir, "bin")
	if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
		tmp := filepath.Join(bin, name+".tmp")
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return err
		}
		for i, b := range contents {
			if err := os.WriteFile(filepath.Join(tmp, names[i]), b, 0o755); err != nil {
				return err
			}
		}
		if err := os.Rename(tmp, filepath.Join(bin, name)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(bin, "current"), []byte(name+"\n"), 0o644)
}

// LabScript is a guest command running the current sanqos-lab (see
// InstallLab) with args. The guest runs a copy in its own memory
// (/run/sanqos-bin), read once through the share, so what it executes
// never depends on 9p's page cache.
func LabScript(dir string, args ...string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "bin", "current"))
	if err != nil {
		return "", fmt.Errorf("no sanqos-lab installed in %s: %w", dir, err)
	}
	name := strings.TrimSpace(string(b))
	src, dst := filepath.Join(dir, "bin", name), "/run/sanqos-bin/"+name
	return fmt.Sprintf("if [ ! -d %[2]s ]; then mkdir -p /run/sanqos-bin && rm -rf %[2]s.tmp && cp -r %[1]s %[2]s.tmp && mv %[2]s.tmp %[2]s || exit 125; fi\nexec %[2]s/sanqos-lab %[3]s", Quote(src), Quote(dst), Quote(args...)), nil
}

// UpLab boots the lab guest (o.Dir, default LabDirectory()) unless it runs, puts
// the lab and product binaries in it (InstallLab) and runs `sanqos-lab lab
// up upArgs...` there, with the output
// on log. A guest this call booted is powered off again if the lab does
// not come up; one that ran before stays.
func UpLab(ctx context.Context, o Options, labBinary, sanqosBinary string, upArgs []string, log io.Writer) (*Guest, error) {
	o.Dir = cmp.Or(o.Dir, LabDirectory())
	g, err := Open(o.Dir)
	fresh := err != nil
	if fresh {
		if left := Leftovers(o.Dir); len(left) > 0 {
			fmt.Fprintf(log, "clearing what a stopped guest left (%s)\n", strings.Join(left, ", "))
			if err := Remove(o.Dir, 10*time.Second); err != nil {
				return nil, err
			}
		}
	}
	if err := InstallLab(o.Dir, labBinary, sanqosBinary); err != nil {
		return nil, fmt.Errorf("copying sanqos-lab and sanqos into the guest's directory: %w", err)
	}
	if fresh {
		image := o.Kernel
		if image == "" {
			if image, _, err = Kernel(); err != nil {
				os.RemoveAll(o.Dir)
				return nil, err
			}
			o.Kernel = image
		}
		fmt.Fprintf(log, "stock-kernel guest: booting %s (%s) in %s…\n", image, cmp.Or(o.Accel, "tcg"), o.Dir)
		if g, err = Start(o); err != nil {
			os.RemoveAll(o.Dir)
			return nil, err
		}
		fmt.Fprintf(log, "stock-kernel guest: %s up (QEMU pid %d)\n", g.Info.Release, g.Info.PID)
	} else {
		fmt.Fprintf(log, "stock-kernel guest: %s already up (QEMU pid %d)\n", g.Info.Release, g.Info.PID)
	}
	script, err := LabScript(o.Dir, append([]string{"lab", "up"}, upArgs...)...)
	if err != nil {
		return nil, err
	}
	rc, err := g.Exec(ctx, script+"\n", log)
	if err == nil && rc != 0 {
		fmt.Fprintln(log, "the lab supervisor's log in the guest ends:")
		g.Exec(context.Background(), "tail -n 20 /run/sanqos-lab-serve.log\n", log)
		err = fmt.Errorf("`sanqos-lab lab up` exited %d in the stock-kernel guest", rc)
	}
	if err != nil {
		if fresh {
			g.Stop(30 * time.Second)
		}
		return nil, err
	}
	return g, nil
}

// RunLab runs `sanqos-lab lab run exp flags...` in the lab guest, its output
// (progress, errors; not the summary it prints) on progress, and moves
// its results to results/exp/runID on the host, pointing
// results/exp/latest at them. It returns the host's results directory
// (empty if the run made none).
func (g *Guest) RunLab(ctx context.Context, exp string, flags []string, results, runID string, progress io.Writer) (string, error) {
	inGuest := filepath.Join(g.Dir, "results")
	script, err := LabScript(g.Dir, append([]string{"lab", "run", exp, "--kernel", "host", "--results", inGuest, "--run-id", runID}, flags...)...)
	if err != nil {
		return "", err
	}
	rc, err := g.Exec(ctx, script+" > /dev/null\n", progress)
	src := filepath.Join(inGuest, exp, runID)
	dst := filepath.Join(results, exp, runID)
	if _, serr := os.Stat(src); serr != nil {
		if err == nil {
			err = fmt.Errorf("`sanqos-lab lab run %s` exited %d in the stock-kernel guest and left no results", exp, rc)
		}
		return "", err
	}
	// A run id given again replaces that run's copy.
	os.RemoveAll(dst)
	if cerr := os.CopyFS(dst, os.DirFS(src)); cerr != nil {
		return "", errors.Join(err, fmt.Errorf("copying the results out of the guest: %w", cerr))
	}
	os.RemoveAll(filepath.Join(inGuest, exp))
	lab.LinkLatest(results, exp, runID)
	if err == nil && rc != 0 {
		err = fmt.Errorf("`sanqos-lab lab run %s` exited %d in the stock-kernel guest", exp, rc)
	}
	return dst, err
}

// DownLab powers the lab guest in dir off and removes its directory; the
// guest's lab, experiments and everything they made end with it. It
// refuses while a command (an experiment) runs in the guest, unless force.
// Without a guest it clears what one left, if anything.
func DownLab(dir string, force bool, log io.Writer) error {
	g, err := Open(dir)
	if err != nil {
		if left := Leftovers(dir); len(left) > 0 {
			fmt.Fprintf(log, "clearing what a stopped guest left (%s)\n", strings.Join(left, ", "))
			return Remove(dir, 10*time.Second)
		}
		fmt.Fprintln(log, "no stock-kernel guest")
		return nil
	}
	if r := g.Running(); len(r) > 0 && !force {
		return fmt.Errorf("running in the stock-kernel guest: %s: stop it first, or use --force", strings.Join(r, "; "))
	}
	if err := g.Stop(time.Minute); err != nil {
		return err
	}
	if left := Leftovers(dir); len(left) > 0 {
		return fmt.Errorf("left after the guest stopped: %s", strings.Join(left, ", "))
	}
	fmt.Fprintf(log, "stock-kernel guest (%s, QEMU pid %d) is down; %s removed\n", g.Info.Release, g.Info.PID, dir)
	return nil
}
