package pkgdeb

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
)

// dpkgRoot runs dpkg on the throwaway root dir. The maintainer scripts run
// without chroot (the root has no shell), with DPKG_ROOT=dir, which tells
// them to leave this host's systemd alone (TestMaintainerScripts covers
// that part). --force-depends: the root has no iptables.
func dpkgRoot(t *testing.T, dir string, args ...string) string {
	t.Helper()
	base := []string{"--root=" + dir, "--log=/dev/null", "--force-script-chrootless", "--force-depends", "--force-not-root"}
	out, err := exec.Command("dpkg", append(base, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// dpkg installs the package into an empty root, records the config as a
// conffile, and the installed binary runs; remove keeps the operator's
// edited config and files, purge removes /etc/sanqos and the enable link.
func TestInstallRemovePurge(t *testing.T) {
	deb, _ := pkg(t)
	testenv.RequireCommands(t, "dpkg")
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	in := func(p string) string { return filepath.Join(root, p) }

	dpkgRoot(t, root, "--install", deb)
	status := dpkgRoot(t, root, "--status", "sanqos")
	for _, s := range []string{"Status: install ok installed", "Version: " + wantDebVersion, "Conffiles:\n /etc/sanqos/sanqos.yaml "} {
		if !strings.Contains(status, s) {
			t.Errorf("dpkg --status lacks %q:\n%s", s, status)
		}
	}
	if out := run(t, in("usr/bin/sanqos"), "version"); !strings.HasPrefix(out, "sanqos "+testVersion) {
		t.Errorf("installed binary: version %q", out)
	}
	for _, p := range []string{"lib/systemd/system/sanqos.service", "usr/share/man/man1/sanqos.1.gz", "usr/share/doc/sanqos/copyright"} {
		if !exists(in(p)) {
			t.Errorf("installed: no /%s", p)
		}
	}
	// What an operator adds: an edit, a shadow config, `systemctl enable`.
	appendFile(t, in("etc/sanqos/sanqos.yaml"), "# edited by the operator\n")
	appendFile(t, in("etc/sanqos/shadow.yaml"), "backend: dry-run\n")
	wants := in("etc/systemd/system/multi-user.target.wants/sanqos.service")
	if err := os.MkdirAll(filepath.Dir(wants), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/systemd/system/sanqos.service", wants); err != nil {
		t.Fatal(err)
	}

	dpkgRoot(t, root, "--remove", "sanqos")
	for _, p := range []string{"usr/bin/sanqos", "lib/systemd/system/sanqos.service", "usr/share/man/man1/sanqos.1.gz"} {
		if exists(in(p)) {
			t.Errorf("removed, but /%s is still there", p)
		}
	}
	if b, err := os.ReadFile(in("etc/sanqos/sanqos.yaml")); err != nil || !strings.HasSuffix(string(b), "# edited by the operator\n") {
		t.Errorf("remove did not keep the edited config: %v", err)
	}
	if !exists(in("etc/sanqos/shadow.yaml")) || !exists(wants) {
		t.Error("remove removed the operator's shadow config or the enable link")
	}

	dpkgRoot(t, root, "--purge", "sanqos")
	for _, p := range []string{in("etc/sanqos"), wants} {
		if exists(p) {
			t.Errorf("purged, but %s is still there", p)
		}
	}
	if out, _ := exec.Command("dpkg", "--root="+root, "--status", "sanqos").CombinedOutput(); strings.Contains(string(out), "Status: install") || strings.Contains(string(out), "config-files") {
		t.Errorf("purged, but dpkg still knows the package:\n%s", out)
	}
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// The maintainer scripts, run as dpkg runs them on a host: systemd is
// only reloaded, never asked to enable, start or restart the agent; a
// removal stops it and then runs `sanqos cleanup`; an upgrade leaves the
// running agent alone. Each script runs in its own mount and network
// namespace: a tmpfs /run with or without /run/systemd/system (booted
// with systemd or not), stubs of systemctl and /usr/bin/sanqos (an
// overlay on /usr/bin) that log their arguments.
func TestMaintainerScripts(t *testing.T) {
	deb, _ := pkg(t)
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "unshare", "mount")
	dir := t.TempDir()
	ctl := filepath.Join(dir, "control")
	run(t, "dpkg-deb", "--control", deb, ctl)
	stubs, usrbin, log := filepath.Join(dir, "stubs"), filepath.Join(dir, "usrbin"), filepath.Join(dir, "log")
	for _, s := range []struct{ path, body string }{
		// It exits 0: to is-active, the agent runs (an upgrade's case).
		{filepath.Join(stubs, "systemctl"), `echo "systemctl $*" >>` + log + "\n"},
		{filepath.Join(usrbin, "sanqos"), `echo "sanqos $*" >>` + log + "\n"},
	} {
		if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.path, []byte("#!/bin/sh\n"+s.body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		script string
		args   []string
		booted bool
		want   string // the stubs' log
	}{
		{"postinst", []string{"configure", ""}, true, "systemctl daemon-reload\n"},
		{"postinst", []string{"configure", "1.2.2"}, true, "systemctl daemon-reload\nsystemctl is-active --quiet sanqos.service\n"},
		{"postinst", []string{"configure", ""}, false, ""},
		{"prerm", []string{"remove"}, true, "systemctl stop sanqos.service\nsanqos cleanup\n"},
		{"prerm", []string{"remove"}, false, "sanqos cleanup\n"},
		{"prerm", []string{"upgrade", "1.2.4"}, true, ""},
		{"postrm", []string{"remove"}, true, "systemctl daemon-reload\n"},
		{"postrm", []string{"upgrade", "1.2.4"}, true, ""},
		{"postrm", []string{"remove"}, false, ""},
	} {
		name := tc.script + " " + strings.Join(tc.args, " ")
		if !tc.booted {
			name += " (no systemd)"
		}
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(log, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			setup := "mount -t tmpfs none /run && mount -t overlay none -o lowerdir=" + usrbin + ":/usr/bin /usr/bin"
			if tc.booted {
				setup += " && mkdir -p /run/systemd/system"
			}
			cmd := exec.Command("unshare", append([]string{"--mount", "--net", "sh", "-c", setup + ` && exec sh "$0" "$@"`, filepath.Join(ctl, tc.script)}, tc.args...)...)
			cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"), "DPKG_ROOT=")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("calls:\n%swant:\n%s", b, tc.want)
			}
			if tc.script == "postinst" && len(tc.args[1]) > 0 && !strings.Contains(string(out), "systemctl restart sanqos") {
				t.Errorf("upgrade: no word that the running agent is the old one:\n%s", out)
			}
		})
	}
}

// Bash completes the packaged binary's real commands and flags with the
// packaged script, as bash-completion loads it.
func TestBashCompletion(t *testing.T) {
	_, root := pkg(t)
	testenv.RequireCommands(t, "bash")
	const lib = "/usr/share/bash-completion/bash_completion"
	if !exists(lib) {
		testenv.Missing(t, "bash-completion not installed (run scripts/setup.sh)")
	}
	// compopt is stubbed: outside an interactive completion bash refuses
	// it, and the options it sets (no space after a word) are not tested.
	script := `source ` + lib + `
source "$ROOT/usr/share/bash-completion/completions/sanqos"
compopt() { :; }
PATH="$ROOT/usr/bin:$PATH"
read -ra COMP_WORDS <<<"$LINE"
COMP_CWORD=$((${#COMP_WORDS[@]}-1)) COMP_LINE="$LINE" COMP_POINT=${#LINE}
__start_sanqos sanqos "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
echo "${COMPREPLY[*]}"`
	for line, want := range map[string]string{
		"sanqos con":               "config",
		"sanqos throttle s":        "set",
		"sanqos config check --al": "--allow-no-resources",
		"sanqos version --j":       "--json",
	} {
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(os.Environ(), "ROOT="+root, "LINE="+line)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%q completes to %q (%v), want %q", line, out, err, want)
		}
	}
}

// zsh and fish load the packaged files by the name of the command, and
// both ask the binary for completions (what TestManPages checks it offers).
func TestZshFishCompletion(t *testing.T) {
	_, root := pkg(t)
	for p, want := range map[string]string{
		"usr/share/zsh/vendor-completions/_sanqos":        "#compdef sanqos\n",
		"usr/share/fish/vendor_completions.d/sanqos.fish": "complete -c sanqos ",
	} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) || !strings.Contains(string(b), "__complete") {
			t.Errorf("/%s: lacks %q or the call to sanqos __complete", p, want)
		}
	}
}
