package main

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/spf13/cobra"
)

func reloadCmd() *cobra.Command {
	var socket func() (string, error)
	c := &cobra.Command{
		Use:   "reload",
		Short: "Have the running agent re-read its config, and wait for its verdict",
		Long: `Asks the running agent (over its root-only control socket) to re-read the
config file it was started with, and waits for its answer. The agent
applies the new config whole or refuses it whole: on refusal the old
config stays active, and reload says why and exits 3.

Applied, the resources, their devices and the discovery settings take
effect together: the agent runs a discovery round with the new config
before it swaps it in, so a resource the file adds is mapped from the
next control tick. A resource discovery cannot map does not refuse the
reload (each resource stands on its own): reload names it and why, and
'sanqos status' shows it UNMAPPED until discovery maps it.

Refused: a file that does not load or validate; one with no resources
(it would leave nothing protected); one that changes a setting the
agent takes once at start (backend, interval, listeners, ...: restart
the agent); one whose discovery cannot read the target.

The systemd unit's ExecReload runs it, so 'systemctl reload sanqos'
fails when the agent refuses the file. SIGHUP reloads the same way, but
says the verdict only in the agent's log.

The agent's socket is the one the config at --config sets (socket:;
by default /etc/sanqos/sanqos.yaml, the unit's), unless --socket names
it. A socket: the file changes needs a restart: reload then finds no
agent on the new one.

Needs root: the agent's control socket is root-only.`,
		Example: `  sanqos reload
  systemctl reload sanqos     # runs sanqos reload
  sanqos reload --config /etc/sanqos/lab.yaml
  sanqos reload --socket /run/sanqos-lab/agent.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sock, err := socket()
			if err != nil {
				return err
			}
			rep, err := agent.NewClient(sock).Reload()
			var refused *agent.RefusedError
			switch {
			case errors.As(err, &refused) && refused.Code == http.StatusUnprocessableEntity:
				// The agent read the file and refused it: a config error.
				return cli.ConfigError{Err: fmt.Errorf("reload refused: %s", refused.Reason)}
			case err != nil:
				return err // no agent, no permission, an agent without --config
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "config reloaded: %d resources\n", rep.Resources)
			for _, name := range slices.Sorted(maps.Keys(rep.Unmapped)) {
				fmt.Fprintf(out, "UNMAPPED %s: %s (it protects nothing until discovery maps it)\n", name, rep.Unmapped[name])
			}
			return nil
		},
	}
	socket = agentSocketFlags(c.Flags())
	return c
}
