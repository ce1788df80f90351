// Package pkgdeb builds sanqos' Debian package from a built binary and
// the source tree, with nfpm (github.com/goreleaser/nfpm/v2) as a library:
// no dpkg-dev, debhelper or Go toolchain is needed on the host that runs
// it, only the binary (which must run there: it writes its own man pages
// and completions, and reports its version). cmd/sanqos-pkg and `make
// deb` call it.
//
// What the package installs and why is in docs/operator-guide.md
// ("Install from the Debian package"); the maintainer scripts, in
// packaging/deb/, say what each does.
//
// Imports (sanqos): internal/version.
package pkgdeb

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/sanqos/sanqos/internal/version"
)

// Options says what to package and where to write it.
type Options struct {
	// Binary is sanqos built for linux, statically linked (CGO_ENABLED=0),
	// runnable here. Its `version --json` gives the package's version
	// and architecture.
	Binary string
	// Source is the root of the source tree (README.md, packaging/,
	// examples/, grafana/, prometheus/).
	Source string
	// OutDir receives sanqos_VERSION_ARCH.deb.
	OutDir string
	// MTime is every file's time and the man pages' date; zero: now.
	// `make deb` passes the commit's time, so a rebuild is identical.
	MTime time.Time
}

// Runtime relations. The agent runs iptables (go-iptables) for the delay
// line, netem and htb, which `backend: auto` falls back to where the
// kernel lacks fq or tc BPF; tc, ipset and nfqueue it drives over
// netlink itself, and the binary is static, so iptables is all it needs.
// The unit loads ip_tables with modprobe (kmod) when it can; doctor lists
// stale sets with ipset. tgtadm (tgt) is how the default discovery finds
// LUNs, but a LIO target needs none of it.
var (
	depends    = []string{"iptables"}
	recommends = []string{"ipset", "kmod"}
	suggests   = []string{"tgt | targetcli-fb"}
)

// maintainer is the identity the project's commits carry.
const maintainer = "sanqos maintainers <maintainers@users.noreply.a-seed-c4d27201.example>"

const description = `autonomic QoS for iSCSI storage targets
sanqos runs on a Linux iSCSI target (tgt, LIO) or a bridge in front of
one. It watches the read wait of each shared storage resource and, when
important reads wait longer than the threshold set, delays the network
packets of the consumers that saturate the resource until the reads are
back under it. Initiators are not modified, no packet is dropped, and if
the agent dies storage traffic flows unthrottled.

The package installs the agent, its systemd unit (not enabled or
started), a commented configuration, man pages and shell completions.`

type builder struct {
	Options
	info version.Info
}

// Build writes the package into o.OutDir and returns its path.
func Build(o Options) (string, error) {
	if o.MTime.IsZero() {
		o.MTime = time.Now()
	}
	b := &builder{Options: o}
	if err := b.readInfo(); err != nil {
		return "", err
	}
	ver, err := DebianVersion(b.info.Version)
	if err != nil {
		return "", err
	}
	arch, err := debArch(b.info.OS, b.info.Arch)
	if err != nil {
		return "", err
	}
	if err := requireStatic(o.Binary); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "sanqos-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	generated, err := b.stage(dir)
	if err != nil {
		return "", err
	}
	info := b.nfpmInfo(ver, arch, append(b.sourceContents(), generated...))
	out := filepath.Join(o.OutDir, deb.Default.ConventionalFileName(info))
	if err := writeAtomic(out, func(f *os.File) error { return deb.Default.Package(info, f) }); err != nil {
		return "", fmt.Errorf("%s: %w", out, err)
	}
	return out, nil
}

// readInfo asks the binary for its version, as an operator would.
func (b *builder) readInfo() error {
	out, err := b.run("version", "--json")
	if err != nil {
		return err
	}
	if err := json.NewDecoder(bytes.NewReader(out)).Decode(&b.info); err != nil {
		return fmt.Errorf("%s version --json: %w", b.Binary, err)
	}
	return nil
}

// requireStatic refuses a dynamically linked binary: the package declares
// no libc dependency, and a cgo build would need one.
func requireStatic(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0 (make deb does)", bin)
		}
	}
	return nil
}

// sourceContents are the package's files taken as they are from the
// source tree.
func (b *builder) sourceContents() files.Contents {
	src := func(p string) string { return filepath.Join(b.Source, filepath.FromSlash(p)) }
	file := func(from, to string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src(from), Destination: to, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}
	c := files.Contents{
		{Source: b.Binary, Destination: binPath, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
		// The example config, as `make install` installs it: every key at
		// its default, commented. A conffile: dpkg keeps the operator's
		// edits on upgrade and asks before replacing them.
		{Source: src("examples/sanqos.yaml"), Destination: confPath, Type: files.TypeConfig, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		file("README.md", docDir+"/README.md", 0o644),
		file("grafana/sanqos-dashboard.json", grafanaPath, 0o644),
		// The alert rules (not their promtool test): a Prometheus on
		// this host may load them where they are, and upgrades with them.
		file("prometheus/sanqos-alerts.yml", alertsPath, 0o644),
	}
	// The other examples the operator guide points to (bridge mode,
	// policies).
	for _, e := range []string{"sanqos.yaml", "bridge.yaml", "slo-classes.yaml", "reservations.yaml"} {
		c = append(c, file("examples/"+e, docDir+"/examples/"+e, 0o644))
	}
	return c
}

func (b *builder) nfpmInfo(ver, arch string, contents files.Contents) *nfpm.Info {
	script := func(name string) string { return filepath.Join(b.Source, "packaging", "deb", name) }
	return &nfpm.Info{
		Name:     "sanqos",
		Arch:     arch,
		Platform: "linux",
		// The Debian version is already made (DebianVersion): nfpm's
		// default semver schema would split and rebuild it.
		Version:       ver,
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    maintainer,
		Description:   description,
		Homepage:      "https://github.com/sanqos/sanqos",
		MTime:         b.MTime,
		Overridables: nfpm.Overridables{
			Depends:    depends,
			Recommends: recommends,
			Suggests:   suggests,
			Contents:   contents,
			Umask:      0o022,
			Scripts: nfpm.Scripts{
				PostInstall: script("postinst"),
				PreRemove:   script("prerm"),
				PostRemove:  script("postrm"),
			},
			Deb: nfpm.Deb{Arch: arch},
		},
	}
}

// writeAtomic writes path through a temporary file in its directory, so
// a failed build leaves no truncated package behind.
func writeAtomic(path string, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".sanqos-deb-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
