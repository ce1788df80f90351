// Package config loads and validates the agent's YAML configuration as a
// whole: every error names the field and its line, and a config with any
// error is rejected entirely, so nothing is ever half-applied.
//
// It only parses and checks; it never touches the kernel or the agent.
//
// Imports (sanqos): internal/editdist, nvmetcp, throttle.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
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
		var es Errors
		if !errors.As(err, &es) {
			return nil, &FileError{Path: path, Err: fmt.Errorf("%s: %w", path, err)}
		}
		for i := range es {
			es[i].File = path
		}
		return nil, &FileError{Path: path, Err: es}
	}
	c.SourcePath = path
	for i, w := range c.Warnings {
		c.Warnings[i] = inFileNamed(path, w)
	}
	if c.TokenFile != "" {
		if c.Token, err = readToken(c.TokenFile); err != nil {
			return nil, &FileError{Path: path, Err: Error{File: path, Line: lineOf(c.root, "token_file"), Field: "token_file", Msg: err.Error()}}
		}
	}
	return c, nil
}

// inFileNamed is warning w of Parse ("line N: ...") as Load reports it,
// in the file: "FILE:N: ...".
func inFileNamed(path, w string) string {
	if rest, ok := strings.CutPrefix(w, "line "); ok {
		if n, msg, ok := strings.Cut(rest, ": "); ok {
			if _, err := strconv.Atoi(n); err == nil {
				return path + ":" + n + ": " + msg
			}
		}
	}
	return path + ": " + w
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
// as a whole. Its errors are Errors, in line order: a YAML syntax error
// alone (nothing after it can be read), else every key that does not
// decode and every value that does not validate.
func Parse(b []byte) (*Config, error) {
	if len(b) > maxSize {
		return nil, fmt.Errorf("config is %d bytes, limit %d", len(b), maxSize)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, syntaxError(b, err)
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
	var errs []Error
	// io.EOF: an empty or comment-only file means "all defaults".
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, err
		}
		// yaml.v3 decodes what it can and leaves the rest at the
		// defaults, so the values that did decode are validated too.
		if errs = decodeErrors(&root); len(errs) == 0 {
			errs = typeErrors(te)
		}
	}
	c.ThresholdAuto = autoTop
	for i := range c.Resources {
		c.Resources[i].ThresholdAuto = autoRes[i]
	}
	c.applyDefaults(&root)
	if errs = withValidation(errs, c.validate(&root)); len(errs) > 0 {
		return nil, sorted(errs)
	}
	c.root = &root
	return &c, nil
}

// withValidation adds to the errors of decoding those of validation that
// are not about a field decoding already reports: validation saw the
// default that the value it could not decode left in place (devices:
// sdb, not a list, is devices: [auto] to validation).
func withValidation(decoding, validation []Error) []Error {
	fields := map[string]bool{}
	for _, e := range decoding {
		fields[e.Field] = true
	}
	for _, e := range validation {
		if !fields[e.Field] {
			decoding = append(decoding, e)
		}
	}
	return decoding
}
