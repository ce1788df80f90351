package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/throttle"
	"github.com/spf13/cobra"
)

// backendOptions choose and configure the throttle backend.
type backendOptions struct {
	Name  string
	Port  int
	Chain string
	Label string
}

func agentCmd() *cobra.Command {
	socket := agent.DefaultSocket
	bo := backendOptions{Name: "auto", Port: 3260, Chain: "OUTPUT", Label: "sanqos"}
	var logJSON bool
	c := &cobra.Command{
		Use:   "agent",
		Short: "Run the sanqos daemon (foreground; systemd-friendly)",
		Long: `Runs the agent in the foreground: it owns the throttle backend and serves the
control API on a root-only unix socket. Logs go to stderr (logfmt, or JSON
with --log-json). SIGTERM/SIGINT remove every rule, set, qdisc and queue it
created, after letting held packets go.`,
		Example: `  sudo sanqos agent
  sudo ip netns exec bm sanqos agent --backend delayline --socket /run/sanqos-lab/agent.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
			if logJSON {
				h = slog.NewJSONHandler(os.Stderr, nil)
			}
			log := slog.New(h)
			t, err := newBackend(bo, log)
			if err != nil {
				return err
			}
			defer func() {
				if err := t.Close(); err != nil {
					log.Error("cleanup", "err", err)
				}
			}()
			l, err := agent.ListenUnix(socket)
			if err != nil {
				return err
			}
			defer os.Remove(socket)
			srv := &http.Server{Handler: (&agent.API{T: t, Log: log}).Handler()}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			go func() { <-ctx.Done(); srv.Close() }()
			log.Info("agent running", "backend", t.Name(), "socket", socket)
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			log.Info("agent stopping: removing throttles")
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&socket, "socket", socket, "control socket path (root-only)")
	f.StringVar(&bo.Name, "backend", bo.Name, "throttle backend: auto|delayline|netem|htb|dry-run")
	f.IntVar(&bo.Port, "iscsi-port", bo.Port, "the target's TCP port whose traffic is throttled")
	f.StringVar(&bo.Chain, "chain", bo.Chain, "netfilter chain: OUTPUT (target mode) or FORWARD (bridge mode)")
	f.StringVar(&bo.Label, "label", bo.Label, "label of the kernel objects this agent creates")
	f.BoolVar(&logJSON, "log-json", false, "log JSON instead of logfmt")
	return c
}

func newBackend(o backendOptions, log *slog.Logger) (throttle.Throttle, error) {
	if o.Port < 1 || o.Port > 65535 {
		return nil, fmt.Errorf("iscsi-port %d out of range", o.Port)
	}
	switch o.Name {
	case "dry-run":
		return throttle.NewMemory(), nil
	default:
		return nil, fmt.Errorf("unknown backend %q (auto|delayline|netem|htb|dry-run)", o.Name)
	}
}
