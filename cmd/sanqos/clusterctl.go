package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sanqos/sanqos/internal/cli"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sanqos/sanqos/cluster"
)

// clusterCmd is the operator's side of cluster control: the policy every
// agent follows (validated before it is written, as the agents validate
// it when they read it) and what etcd says of each shared resource. It is
// one function, long for its subcommands' help texts and flags, because
// they share the endpoints and prefix flags' variables.
func clusterCmd() *cobra.Command {
	var endpoints, prefix string
	c := &cobra.Command{
		Use:   "cluster",
		Short: "Read and write the policy that agents started with --etcd share",
		Long: `The policy is the shared part of the agent's config (threshold, objective,
ewma_alpha, pid, throttleable_write_mb_s, resources) kept under one etcd key,
<prefix>/policy. 'policy put' validates the whole document first and writes
nothing if it is refused; every agent applies a new policy without a restart.
Write it with this command rather than etcdctl, which skips the validation
(agents would refuse a bad policy when reading it, and keep the old one).`,
		Example: `  sanqos cluster --etcd http://10.0.0.5:2379 policy put policy.yaml
  sanqos cluster --etcd http://10.0.0.5:2379 policy get
  sanqos cluster --etcd http://10.0.0.5:2379 status`,
	}
	c.PersistentFlags().StringVar(&endpoints, "etcd", "", "etcd endpoints (comma-separated URLs), as given to the agents")
	c.PersistentFlags().StringVar(&prefix, "etcd-prefix", cluster.DefaultPrefix, "prefix of the cluster's etcd keys")
	// withEtcd runs f with a client and a 5 s deadline for its requests.
	withEtcd := func(cmd *cobra.Command, f func(ctx context.Context, cli *clientv3.Client) error) error {
		if endpoints == "" {
			return cli.Usagef("--etcd is required")
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
		defer cancel()
		return f(ctx, cli)
	}
	policy := &cobra.Command{Use: "policy", Short: "Show or replace the shared policy",
		Long:    "The shared policy: 'get' prints it, 'put' validates and replaces it as a whole.",
		Example: "  sanqos cluster --etcd http://10.0.0.5:2379 policy get > policy.yaml\n  sanqos cluster --etcd http://10.0.0.5:2379 policy put policy.yaml"}
	var ifRev int64
	put := &cobra.Command{
		Use:   "put FILE",
		Short: "Validate FILE as a policy and, only if valid, write it (- reads stdin)",
		Long: `Validates FILE with the agent's own config validator plus the policy's rules
(only shared keys: no devices, portals, backend or listeners) and writes it
to <prefix>/policy only if all of it is valid; errors name the field and
line. With --if-revision the write happens only if nobody changed the
policy since that revision, so two operators' edits cannot overwrite each
other.`,
		Example: `  sanqos cluster --etcd http://10.0.0.5:2379 policy put policy.yaml
  printf 'threshold: 10ms\n' | sanqos cluster --etcd http://10.0.0.5:2379 policy put -
  sanqos cluster --etcd http://10.0.0.5:2379 policy put --if-revision 42 policy.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := readArg(cmd.InOrStdin(), args[0])
			if err != nil {
				return cli.ConfigError{Err: err}
			}
			if _, err := cluster.ValidatePolicy(doc); err != nil {
				return cli.ConfigError{Err: fmt.Errorf("%s: %w (nothing written)", args[0], err)}
			}
			return withEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				p := cluster.NewPolicies(cli, prefix, nil)
				var rev int64
				var err error
				if cmd.Flags().Changed("if-revision") {
					rev, err = p.PutIf(ctx, doc, ifRev)
				} else {
					rev, err = p.Put(ctx, doc)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "policy written at revision %d (%s)\n", rev, cluster.PolicyKey(prefix))
				return nil
			})
		},
	}
	put.Flags().Int64Var(&ifRev, "if-revision", 0, "write only if the stored policy is still at this revision (from 'policy get'; 0: none stored)")
	get := &cobra.Command{
		Use:   "get",
		Short: "Print the stored policy (its revision on stderr)",
		Long: `Prints the policy document as stored, and on stderr its revision (for
'policy put --if-revision'). Fails when no policy is stored: the agents then
run on their own files.`,
		Example: "  sanqos cluster --etcd http://10.0.0.5:2379 policy get",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				doc, rev, err := cluster.NewPolicies(cli, prefix, nil).Get(ctx)
				if err != nil {
					return err
				}
				if doc == nil {
					return fmt.Errorf("no policy at %s: agents run on their own files", cluster.PolicyKey(prefix))
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "revision %d\n", rev)
				_, err = cmd.OutOrStdout().Write(doc)
				return err
			})
		},
	}
	policy.AddCommand(put, get)
	status := &cobra.Command{
		Use:   "status",
		Short: "Show each shared resource's leader, shared step and live agents",
		Long: `Reads etcd once: per resource the leader's last record (sequence, delay,
age: a record older than the agents' freshness bound, 500 ms, means the
agents have fallen back to local control) and the agents whose indicators
are alive under their leases.`,
		Example: "  sanqos cluster --etcd http://10.0.0.5:2379 status",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withEtcd(cmd, func(ctx context.Context, cli *clientv3.Client) error {
				ov, err := cluster.Overview(ctx, cli, prefix)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "RESOURCE\tLEADER\tSEQ\tDELAY\tRECORD AGE\tAGENTS")
				for _, o := range ov {
					leader, seq, delay, age := "-", "-", "-", "-"
					if s := o.Shared; s != nil {
						leader, seq, delay = s.Leader, fmt.Sprint(s.Seq), time.Duration(s.DelayNs).String()
						age = time.Since(s.Time).Round(time.Millisecond).String()
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Resource, leader, seq, delay, age, strings.Join(o.Agents, ","))
				}
				return w.Flush()
			})
		},
	}
	c.AddCommand(policy, status)
	return c
}

func readArg(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}
