package pkgdeb

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/testenv"
)

// The package is built once per test binary from sanqos linked as a
// tagged release three commits on would be by `make deb`.
const (
	testVersion    = "v1.2.3-4-gabcdef0"
	testCommit     = "abcdef0123456789abcdef0123456789abcdef01"
	wantDebVersion = "1.2.3+git4.abcdef0"
)

var (
	buildOnce sync.Once
	built     struct{ dir, deb, root string }
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// pkg builds the package and unpacks it (dpkg-deb -x) once; tests only
// read both. It returns the .deb and the unpacked tree.
func pkg(t *testing.T) (deb, root string) {
	t.Helper()
	testenv.RequireCommands(t, "dpkg-deb")
	buildOnce.Do(func() {
		if built.dir, buildErr = os.MkdirTemp("", "sanqos-pkgdeb-test-"); buildErr != nil {
			return
		}
		bin := filepath.Join(built.dir, "sanqos")
		ldflags := "-X github.com/sanqos/sanqos/internal/version.Version=" + testVersion +
			" -X github.com/sanqos/sanqos/internal/version.Commit=" + testCommit
		cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, "github.com/sanqos/sanqos/cmd/sanqos")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = &cmdError{"go build", err, out}
			return
		}
		built.deb, buildErr = Build(Options{Binary: bin, Source: "../..", OutDir: built.dir, MTime: time.Unix(1790000000, 0)})
		if buildErr != nil {
			return
		}
		built.root = filepath.Join(built.dir, "root")
		if out, err := exec.Command("dpkg-deb", "-x", built.deb, built.root).CombinedOutput(); err != nil {
			buildErr = &cmdError{"dpkg-deb -x", err, out}
		}
	})
	if buildErr != nil {
		t.Fatalf("building the package: %v", buildErr)
	}
	return built.deb, built.root
}

type cmdError struct {
	what string
	err  error
	out  []byte
}

func (e *cmdError) Error() string { return e.what + ": " + e.err.Error() + "\n" + string(e.out) }

// run runs a command that must succeed and returns its standard output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// The package holds exactly the files it is meant to, with their modes:
// dpkg-deb -c lists the data archive as dpkg will unpack it.
func TestPackageFiles(t *testing.T) {
	deb, _ := pkg(t)
	got := map[string]string{} // path: mode
	for _, l := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || f[1] != "root/root" {
			t.Fatalf("dpkg-deb -c line %q: want root/root ownership", l)
		}
		if f[0][0] == '-' {
			got[strings.TrimPrefix(f[len(f)-1], ".")] = f[0]
		}
	}
	want := map[string]string{
		"/usr/bin/sanqos":                                  "-rwxr-xr-x",
		"/lib/systemd/system/sanqos.service":               "-rw-r--r--",
		"/etc/sanqos/sanqos.yaml":                          "-rw-r--r--",
		"/usr/share/bash-completion/completions/sanqos":    "-rw-r--r--",
		"/usr/share/zsh/vendor-completions/_sanqos":        "-rw-r--r--",
		"/usr/share/fish/vendor_completions.d/sanqos.fish": "-rw-r--r--",
		"/usr/share/doc/sanqos/README.md":                  "-rw-r--r--",
		"/usr/share/doc/sanqos/copyright":                  "-rw-r--r--",
		"/usr/share/sanqos/grafana/sanqos-dashboard.json":  "-rw-r--r--",
		"/usr/share/sanqos/prometheus/sanqos-alerts.yml":   "-rw-r--r--",
	}
	for _, e := range []string{"sanqos", "bridge", "slo-classes", "reservations"} {
		want["/usr/share/doc/sanqos/examples/"+e+".yaml"] = "-rw-r--r--"
	}
	manPage := regexp.MustCompile(`^/usr/share/man/man1/sanqos(-[a-z0-9-]+)?\.1\.gz$`)
	pages := 0
	for p, mode := range got {
		switch w, ok := want[p]; {
		case ok && mode != w:
			t.Errorf("%s: mode %s, want %s", p, mode, w)
		case !ok && manPage.MatchString(p) && mode == "-rw-r--r--":
			pages++
		case !ok:
			t.Errorf("unexpected file %s (%s)", p, mode)
		}
	}
	for p := range want {
		if _, ok := got[p]; !ok {
			t.Errorf("missing %s", p)
		}
	}
	if pages < 20 {
		t.Errorf("%d man pages, want one per command (at least 20)", pages)
	}
}

// The control fields: version from `sanqos version`, this host's
// architecture, the runtime dependency, the conffile and the scripts.
func TestControl(t *testing.T) {
	deb, _ := pkg(t)
	if base := filepath.Base(deb); base != "sanqos_"+wantDebVersion+"_"+mustArch(t)+".deb" {
		t.Errorf("file name %s", base)
	}
	for field, want := range map[string]string{
		"Package": "sanqos", "Version": wantDebVersion, "Architecture": mustArch(t),
		"Depends": "iptables", "Recommends": "ipset, kmod", "Section": "admin", "Priority": "optional",
		"Homepage": "https://github.com/sanqos/sanqos", "Maintainer": maintainer,
	} {
		if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, field)); got != want {
			t.Errorf("%s: %q, want %q", field, got, want)
		}
	}
	if d := run(t, "dpkg-deb", "-f", deb, "Description"); !strings.HasPrefix(d, "autonomic QoS for iSCSI") || strings.Count(d, "\n") < 5 {
		t.Errorf("Description %q: want a synopsis and a long description", d)
	}
	if got := run(t, "dpkg-deb", "-I", deb, "conffiles"); got != "/etc/sanqos/sanqos.yaml\n" {
		t.Errorf("conffiles %q", got)
	}
	info := run(t, "dpkg-deb", "--info", deb)
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		// --info marks an executable control member with '*'.
		if !regexp.MustCompile(`\n\s+\d+ bytes,\s+\d+ lines\s+\*\s+` + s + `\s+#!/bin/sh\n`).MatchString(info) {
			t.Errorf("%s: not an executable /bin/sh script in\n%s", s, info)
		}
	}
	if strings.Contains(info, "preinst") {
		t.Error("a preinst: the package needs none")
	}
}

func mustArch(t *testing.T) string {
	a, err := debArch(runtime.GOOS, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The installed binary reports the version it was linked with: the one
// the package is named after.
func TestPackagedBinary(t *testing.T) {
	_, root := pkg(t)
	out := run(t, filepath.Join(root, "usr/bin/sanqos"), "version", "--json")
	for _, s := range []string{`"version": "` + testVersion + `"`, `"commit": "` + testCommit + `"`} {
		if !strings.Contains(out, s) {
			t.Errorf("version --json lacks %s:\n%s", s, out)
		}
	}
	if err := requireStatic(filepath.Join(root, "usr/bin/sanqos")); err != nil {
		t.Error(err)
	}
}

// The conffile is valid as the package ships it: the packaged binary's
// `sanqos config check` (the agent's own validation, config.Load) accepts
// it, so a reload after installing succeeds.
func TestPackagedConfigValidates(t *testing.T) {
	_, root := pkg(t)
	conf := filepath.Join(root, "etc/sanqos/sanqos.yaml")
	out := run(t, filepath.Join(root, "usr/bin/sanqos"), "config", "check", conf)
	if !strings.HasPrefix(out, conf+": ok (1 resources") {
		t.Errorf("config check: %q", out)
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), "\n#") < 20 {
		t.Error("the conffile has hardly any comments: an operator edits it")
	}
}

// The unit is the one in packaging/, pointing at the packaged binary.
func TestPackagedUnit(t *testing.T) {
	_, root := pkg(t)
	b, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/sanqos.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nExecStart=/usr/bin/sanqos agent --config /etc/sanqos/sanqos.yaml") || strings.Contains(string(b), "@BINDIR@") {
		t.Errorf("unit's ExecStart is not /usr/bin/sanqos's:\n%s", b)
	}
}

// gunzip reads a man page from the unpacked package.
func gunzip(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return string(b)
}

var seeAlsoRef = regexp.MustCompile(`\\fB(sanqos[a-z0-9\\-]*)\(1\)\\fP`)

// Each man page documents a real command: its SYNOPSIS names a command
// path the packaged binary answers --help for. The pages link into one
// tree from sanqos(1) (every page linked, every link a page), and the root
// page's commands are the ones shell completion offers.
func TestManPages(t *testing.T) {
	_, root := pkg(t)
	bin := filepath.Join(root, "usr/bin/sanqos")
	dir := filepath.Join(root, "usr/share/man/man1")
	paths, err := filepath.Glob(filepath.Join(dir, "*.1.gz"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no man pages in %s (%v)", dir, err)
	}
	linked := map[string]bool{"sanqos": true}
	var rootRefs []string
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".1.gz")
		for _, lab := range []string{"sanqos-lab", "sanqos-sim", "sanqos-tune", "sanqos-report"} {
			if name == lab || strings.HasPrefix(name, lab+"-") {
				t.Errorf("%s: a page of sanqos-lab's commands, which the package does not ship", name)
			}
		}
		page := gunzip(t, p)
		if !strings.Contains(page, `.TH "`+strings.ToUpper(name)+`" "1"`) || !strings.Contains(page, "sanqos "+testVersion) {
			t.Errorf("%s: no title line for %s, version %s", name, name, testVersion)
		}
		for _, sec := range []string{".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS"} {
			if !strings.Contains(page, sec) {
				t.Errorf("%s: no %s", name, sec)
			}
		}
		path := synopsisPath(page)
		if strings.Join(path, "-") != name {
			t.Errorf("%s: SYNOPSIS names %q", name, path)
		} else if out := run(t, bin, append(path[1:], "--help")...); !strings.Contains(out, "NAME\n    "+strings.Join(path, " ")+" - ") {
			t.Errorf("%s: %s --help does not describe that command:\n%s", name, strings.Join(path, " "), out)
		}
		_, seeAlso, _ := strings.Cut(page, ".SH SEE ALSO")
		for _, m := range seeAlsoRef.FindAllStringSubmatch(seeAlso, -1) {
			ref := strings.ReplaceAll(m[1], `\-`, "-")
			linked[ref] = true
			if _, err := os.Stat(filepath.Join(dir, ref+".1.gz")); err != nil {
				t.Errorf("%s: SEE ALSO %s(1), which the package lacks", name, ref)
			}
			if name == "sanqos" {
				rootRefs = append(rootRefs, strings.TrimPrefix(ref, "sanqos-"))
			}
		}
		if name == "sanqos" && !strings.Contains(page, ".SH EXIT STATUS") {
			t.Error("sanqos(1) has no EXIT STATUS")
		}
	}
	for _, p := range paths {
		if name := strings.TrimSuffix(filepath.Base(p), ".1.gz"); !linked[name] {
			t.Errorf("%s(1) is linked from no page", name)
		}
	}
	sort.Strings(rootRefs)
	if want := topLevel(t, bin); strings.Join(rootRefs, " ") != strings.Join(want, " ") {
		t.Errorf("sanqos(1) lists %v, completion offers %v", rootRefs, want)
	}
}

var synopsis = regexp.MustCompile(`\.SH SYNOPSIS\n\\fB(.*?)\\fP`)

// synopsisPath is the command path a page's SYNOPSIS starts with: its
// words up to the first argument or flag.
func synopsisPath(page string) []string {
	m := synopsis.FindStringSubmatch(page)
	if m == nil {
		return nil
	}
	var path []string
	for _, w := range strings.Fields(strings.ReplaceAll(m[1], `\-`, "-")) {
		if !regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(w) {
			break
		}
		path = append(path, w)
	}
	return path
}

// topLevel is the top-level commands the binary's completion offers (what
// the three completion scripts ask it for), without help.
func topLevel(t *testing.T, bin string) []string {
	var names []string
	for _, l := range strings.Split(run(t, bin, "__complete", ""), "\n") {
		if n, _, _ := strings.Cut(l, "\t"); n != "" && n != "help" && !strings.HasPrefix(n, ":") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) < 10 {
		t.Fatalf("completion offers only %v", names)
	}
	return names
}
