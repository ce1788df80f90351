// Package config loads and validates the agent's YAML configuration as a
// whole: every error names the field and its line, and a config with any
// error is rejected entirely, so nothing is ever half-applied.
//
// It only parses and checks; it never touches the kernel or the agent.
//
// Imports (sanqos): internal/editdist, throttle.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads and validates a file. Its errors are *FileError.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	c, err := Parse(b)
	if err != nil {
		return nil, &FileError{Path: path, Err: fmt.Errorf("%s: %w", path, err)}
	}
	c.SourcePath = path
	if c.TokenFile != "" {
		if c.Token, err = readToken(c.TokenFile); err != nil {
			return nil, &FileError{Path: path, Err: fmt.Errorf("%s: token_file: %w", path, err)}
		}
	}
	return c, nil
}

// FileError is every error of Load: the config at Path, or the token file
// it names, could not be read, or is not a valid config. Err says why and
// names the file. It lets a caller tell a bad config from other failures
// (sanqos exits 3 for it).
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string { return e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// MinTokenLen is the shortest token accepted: 16 random bytes, hex.
const MinTokenLen = 32

// readToken reads a bearer token from a file that only its owner can read:
// a token anyone on the machine can read protects nothing.
func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by group or others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinTokenLen || strings.ContainsAny(tok, " \t\n") {
		return "", fmt.Errorf("%s: want one token of at least %d characters (e.g. openssl rand -hex 16)", path, MinTokenLen)
	}
	return tok, nil
}

// maxSize bounds a config file; a larger one is a mistake or an attack.
const maxSize = 1 << 20

// Parse decodes YAML over the defaults, rejecting unknown fields, fills in
// what defaults to other fields (applyDefaults), and validates the result
// as a whole.
func Parse(b []byte) (*Config, error) {
	if len(b) > maxSize {
		return nil, fmt.Errorf("config is %d bytes, limit %d", len(b), maxSize)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	// threshold: auto decodes as AutoStart, flagged (auto.go).
	autoTop, autoRes := autoThresholds(&root)
	if autoTop || len(autoRes) > 0 {
		var err error
		if b, err = yaml.Marshal(&root); err != nil {
			return nil, err
		}
	}
	c := Defaults()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// io.EOF: an empty or comment-only file means "all defaults".
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errs := decodeErrors(&root); errors.As(err, &te) && len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return nil, err
	}
	c.ThresholdAuto = autoTop
	for i := range c.Resources {
		c.Resources[i].ThresholdAuto = autoRes[i]
	}
	c.applyDefaults(&root)
	if errs := c.validate(&root); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &c, nil
}
