package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sanqos/sanqos/agent"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// defaultConfig is the config the packaged unit starts the agent with.
const defaultConfig = "/etc/sanqos/sanqos.yaml"

// agentSocketFlags adds --socket and --config to f, for the commands
// that talk to a running agent, and returns what finds its socket:
// --socket when given; else the socket: the agent's config sets (the
// file at --config, by default the unit's, when it exists); else the
// default. An agent whose config moves its socket is found without
// --socket, as the unit's ExecReload must find it.
func agentSocketFlags(f *pflag.FlagSet) func() (string, error) {
	socket, cfg := agent.DefaultSocket, defaultConfig
	f.StringVar(&socket, "socket", socket, "the agent's control socket (default: the config's socket:, else "+agent.DefaultSocket+")")
	f.StringVar(&cfg, "config", cfg, "the agent's config, read for its socket: when --socket is not given")
	return func() (string, error) {
		if f.Changed("socket") {
			return socket, nil
		}
		s, err := configSocket(cfg)
		if errors.Is(err, fs.ErrNotExist) && !f.Changed("config") {
			return agent.DefaultSocket, nil // no config where the unit keeps it
		}
		return s, err
	}
}

// configSocket is the socket: the config at path sets (the default
// without one). Only that key is read: a file with errors elsewhere is
// still the agent's to judge (sanqos reload asks it), and a file that
// does not parse leaves the default.
func configSocket(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var c struct {
		Socket string `yaml:"socket"`
	}
	if yaml.Unmarshal(b, &c) != nil || c.Socket == "" {
		return agent.DefaultSocket, nil
	}
	if !filepath.IsAbs(c.Socket) {
		return "", fmt.Errorf("%s: socket: %q: want an absolute path", path, c.Socket)
	}
	return c.Socket, nil
}
