// Command configdoc writes docs/configuration.md, the reference of every
// key of the agent's config, from package config itself: the keys, their
// Go types and doc comments from the schema's source (config/schema.go,
// config/reservations.go), the validator's messages from its source
// (config/validate.go), the defaults from config.Parse of an empty file
// (and of one resource per policy, for the keys a resource inherits), and
// an example per key (examples.go) that must itself parse. Its test fails
// when the page differs from what it would write, so the page cannot go
// stale: after changing the config, run
//
//	go generate ./config
//
// (or go run ./internal/configdoc from the module root).
//
// Imports (sanqos): config.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// page is where the reference lives, from the module root.
const page = "docs/configuration.md"

func main() {
	check := flag.Bool("check", false, "only report whether "+page+" is up to date (exit 1 if not)")
	flag.Parse()
	root, err := moduleRoot()
	if err == nil {
		err = run(root, *check)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	want, err := generate(filepath.Join(root, "config"))
	if err != nil {
		return err
	}
	out := filepath.Join(root, page)
	if check {
		have, err := os.ReadFile(out)
		if err != nil {
			return err
		}
		if !bytes.Equal(have, want) {
			return fmt.Errorf("%s is stale: run go generate ./config", page)
		}
		return nil
	}
	return os.WriteFile(out, want, 0o644)
}

// moduleRoot is the nearest directory up from here with a go.mod: the
// generator runs from config/ (go generate) or from the root (go run).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
