package pkgdeb

import (
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/goreleaser/nfpm/v2/files"
)

// Where the package puts what it generates (Debian's paths: zsh's
// vendor-completions is on Debian zsh's fpath, site-functions is not).
const (
	manDir      = "/usr/share/man/man1"
	bashComp    = "/usr/share/bash-completion/completions/sanqos"
	zshComp     = "/usr/share/zsh/vendor-completions/_sanqos"
	fishComp    = "/usr/share/fish/vendor_completions.d/sanqos.fish"
	unitPath    = "/lib/systemd/system/sanqos.service"
	docDir      = "/usr/share/doc/sanqos"
	binPath     = "/usr/bin/sanqos"
	confPath    = "/etc/sanqos/sanqos.yaml"
	grafanaPath = "/usr/share/sanqos/grafana/sanqos-dashboard.json"
	alertsPath  = "/usr/share/sanqos/prometheus/sanqos-alerts.yml"
)

// stage writes the files generated for the package into dir: the man
// pages and completions (by the binary itself, so they describe exactly
// the commands it has), the unit with its binary's path, and the
// copyright file with the Go modules linked in. It returns them as
// package contents.
func (b *builder) stage(dir string) (files.Contents, error) {
	var out files.Contents
	add := func(src, dst string) {
		out = append(out, &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}
	pages, err := b.manPages(filepath.Join(dir, "man"))
	if err != nil {
		return nil, err
	}
	for _, p := range pages {
		add(p, manDir+"/"+filepath.Base(p))
	}
	for _, c := range [][2]string{{"bash", bashComp}, {"zsh", zshComp}, {"fish", fishComp}} {
		sh, dst := c[0], c[1]
		script, err := b.run("completion", sh)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, "completion."+sh)
		if err := os.WriteFile(p, script, 0o644); err != nil {
			return nil, err
		}
		add(p, dst)
	}
	unit, err := b.unit(dir)
	if err != nil {
		return nil, err
	}
	add(unit, unitPath)
	cp, err := b.copyright(dir)
	if err != nil {
		return nil, err
	}
	add(cp, docDir+"/copyright")
	return out, nil
}

// run runs the binary being packaged, with the package's date as
// SOURCE_DATE_EPOCH (the man pages' date).
func (b *builder) run(args ...string) ([]byte, error) {
	cmd := exec.Command(b.Binary, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(b.MTime.Unix(), 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", b.Binary, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// manPages has the binary write its man pages into dir and compresses
// each as Debian policy asks (gzip -9n: no name, no time, so two builds
// of one commit are identical).
func (b *builder) manPages(dir string) ([]string, error) {
	if _, err := b.run("manpages", dir); err != nil {
		return nil, err
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err != nil || len(pages) == 0 {
		return nil, fmt.Errorf("%s manpages wrote no page into %s (%v)", b.Binary, dir, err)
	}
	var out []string
	for _, p := range pages {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var gz bytes.Buffer
		w, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(raw); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p+".gz", gz.Bytes(), 0o644); err != nil {
			return nil, err
		}
		out = append(out, p+".gz")
	}
	return out, nil
}

var placeholder = regexp.MustCompile(`@[A-Z_]+@`)

// unit is packaging/sanqos.service with the packaged binary's directory
// where `make install` substitutes its BINDIR.
func (b *builder) unit(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(b.Source, "packaging", "sanqos.service"))
	if err != nil {
		return "", err
	}
	text := strings.ReplaceAll(string(raw), "@BINDIR@", filepath.Dir(binPath))
	if left := placeholder.FindString(text); left != "" {
		return "", fmt.Errorf("packaging/sanqos.service: %s is no placeholder the package fills", left)
	}
	p := filepath.Join(dir, "sanqos.service")
	return p, os.WriteFile(p, []byte(text), 0o644)
}

// copyright is packaging/deb/copyright followed by the Go modules the
// binary links, as its build information records them: the package
// ships their code, so it says whose it is.
func (b *builder) copyright(dir string) (string, error) {
	head, err := os.ReadFile(filepath.Join(b.Source, "packaging", "deb", "copyright"))
	if err != nil {
		return "", err
	}
	bi, err := buildinfo.ReadFile(b.Binary)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	buf.Write(head)
	buf.WriteString("\n")
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		fmt.Fprintf(&buf, "  %s %s\n", m.Path, m.Version)
	}
	fmt.Fprintf(&buf, "  the Go standard library and runtime, %s (BSD-3-Clause)\n", bi.GoVersion)
	p := filepath.Join(dir, "copyright")
	return p, os.WriteFile(p, buf.Bytes(), 0o644)
}
