package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
)

// installed are the files `make install` writes, relative to its
// directory variables (uninstall's list).
var installed = []string{
	"bin/sanqos", "unit/sanqos.service",
	"share/bash-completion/completions/sanqos", "share/zsh/site-functions/_sanqos",
	"share/fish/vendor_completions.d/sanqos.fish", "share/sanqos/grafana/sanqos-dashboard.json",
	"share/sanqos/prometheus/sanqos-alerts.yml",
}

// makeVars points make's install directories into root, and systemctl at
// a recorder that appends its arguments to root/systemctl.log.
func makeVars(t testing.TB, root string) []string {
	t.Helper()
	fake := filepath.Join(root, "systemctl")
	script := "#!/bin/sh\necho \"$*\" >>" + filepath.Join(root, "systemctl.log") + "\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"BINDIR=" + root + "/bin", "UNITDIR=" + root + "/unit", "DATADIR=" + root + "/share",
		"SYSCONFDIR=" + root + "/etc", "SYSTEMCTL=" + fake, "SYSTEMD_BOOTED=yes"}
}

func systemctlLog(t testing.TB, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "systemctl.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// `make uninstall` on a host booted with systemd (its systemctl recorded)
// stops and disables the unit, has the installed binary remove what a
// crashed agent left (rules, sets, qdiscs, the IFB; run in a scratch
// network namespace), removes every installed file but the config, and
// reloads systemd. Run again, with nothing installed, it succeeds without
// asking systemctl to stop anything. With DESTDIR it only removes files.
// It is one function because its runs of `make uninstall` are in order on
// one installed tree: the second run's premise is the first's result.
func TestMakeUninstall(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "make", "ip", "tc", "iptables-save", "ipset")
	bin := sanqos(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	vars := makeVars(t, root)
	for _, f := range installed[1:] {
		writeFile(t, filepath.Join(root, f), "installed\n", 0o644)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "bin/sanqos"), string(b), 0o755)
	cfg := filepath.Join(root, "etc/sanqos/sanqos.yaml")
	writeFile(t, cfg, "# the operator's\n", 0o644)

	// A crashed agent's objects: the delay line's rules and sets, the
	// write caps' IFB, HTB tree and ingress filters.
	ns := scratchNS(t)
	sock := filepath.Join(root, "agent.sock")
	a := startAgent(t, exec.Command("ip", "netns", "exec", ns, bin, "agent", "--backend", "delayline+htb",
		"--interface", nsDev, "--socket", sock, "--log-json"))
	a.waitLog(t, "agent running", 30*time.Second)
	testenv.Run(t, bin, "throttle", "set", nsConsumer, "--socket", sock, "--read-delay", "2ms", "--write-rate", "2MiB/s")
	if err := a.stop(t, syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("SIGKILL: the agent exited cleanly")
	}
	if len(leftovers(t, ns)) == 0 {
		t.Fatal("the killed agent left nothing: the test proves nothing")
	}

	makeUninstall := func(extra ...string) string {
		t.Helper()
		argv := append([]string{"ip", "netns", "exec", ns, "make", "-C", repo, "--no-print-directory", "uninstall"}, append(vars, extra...)...)
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("make uninstall: %v\n%s", err, out)
		}
		return string(out)
	}
	out := makeUninstall()
	if got, want := systemctlLog(t, root), "disable --now sanqos.service\ndaemon-reload\nreset-failed sanqos.service\n"; got != want {
		t.Errorf("systemctl was asked:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(out, "sanqos cleanup") {
		t.Errorf("make uninstall did not run sanqos cleanup:\n%s", out)
	}
	for _, f := range installed {
		if _, err := os.Stat(filepath.Join(root, f)); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "share/sanqos")); !os.IsNotExist(err) {
		t.Errorf("share/sanqos still there (%v)", err)
	}
	if _, err := os.Stat(cfg); err != nil {
		t.Errorf("the config went: %v", err)
	}
	if l := leftovers(t, ns); len(l) > 0 {
		t.Errorf("after make uninstall: %v", l)
	}

	// Nothing installed (any more): no error, nothing stopped.
	os.Remove(filepath.Join(root, "systemctl.log"))
	out = makeUninstall()
	if got, want := systemctlLog(t, root), "daemon-reload\nreset-failed sanqos.service\n"; got != want {
		t.Errorf("nothing installed: systemctl was asked:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(out, "sanqos cleanup") {
		t.Errorf("nothing installed, yet cleanup ran:\n%s", out)
	}

	// Staged: files only, even with an installed unit and binary on the
	// host (the binaries here only leave a mark when run).
	os.Remove(filepath.Join(root, "systemctl.log"))
	dest := filepath.Join(root, "dest")
	mark := "#!/bin/sh\ntouch " + filepath.Join(root, "cleanup-ran") + "\n"
	for _, f := range installed {
		writeFile(t, filepath.Join(dest, root, f), mark, 0o755)
		writeFile(t, filepath.Join(root, f), mark, 0o755)
	}
	makeUninstall("DESTDIR=" + dest)
	for _, f := range installed {
		if _, err := os.Stat(filepath.Join(dest, root, f)); !os.IsNotExist(err) {
			t.Errorf("DESTDIR: %s still there (%v)", f, err)
		}
	}
	if got := systemctlLog(t, root); got != "" {
		t.Errorf("DESTDIR: systemctl was asked:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "cleanup-ran")); err == nil {
		t.Error("DESTDIR: a binary was run")
	}
	for _, f := range installed {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("DESTDIR: the host's %s went: %v", f, err)
		}
	}
}
