package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/demo"
)

func init() { extraCommands = append(extraCommands, newUpCommand) }

func newUpCommand() *cobra.Command {
	var (
		o             cluster.Options
		mode          string
		noDemo        bool
		trustDDLRoles bool
		autoRebuild   bool
		certifierArgs []string
		agentArgs     []string
		demoDuration  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create and start a local cluster (or restart a stopped one) and run a short demo",
		Long: `Starts a local tashkent cluster in --data-dir: N PostgreSQL 15 replicas with the
tashkent extension loaded, an agent beside each replica, and a certifier (or a
Raft group of them), all detached so that they keep running after this
command returns. Everything is recorded in DATA-DIR/cluster.json. The
extension is built from this binary's source the first time (it needs make,
a C compiler and the PostgreSQL 15 server headers: postgresql-server-dev-15,
or their directory in TASHKENT_PG_INCLUDEDIR, as scripts/pg-server-headers.sh
prints it).

Clients connect to any replica's PostgreSQL directly, as to any PostgreSQL
server; a replica admits them once its agent has caught up with the cluster.
Run again on the same directory, up restarts whatever is not running (same
ports, same data; no initdb), also after a crash of every process; with
--replicas it also grows or shrinks the cluster. A supervisor process
rebuilds a replica whose agent halts (--auto-rebuild).

Unless --no-demo, it then runs a few seconds of bank transfers on every
replica and shows that the replicas end at the same version with the same
data. Stop everything with ` + "`tashkent down --data-dir DIR`" + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Dir == "" {
				return errors.New("--data-dir is required: the directory that holds the cluster")
			}
			f := cmd.Flags()
			if !f.Changed("replicas") {
				o.Replicas = 0
			}
			if f.Changed("mode") {
				m, err := cluster.ParseMode(mode)
				if err != nil {
					return fmt.Errorf("--mode: %w", err)
				}
				o.Mode = m
			}
			if f.Changed("trust-ddl-roles") {
				o.TrustDDLRoles = &trustDDLRoles
			}
			if f.Changed("auto-rebuild") {
				o.AutoRebuild = &autoRebuild
			}
			if f.Changed("certifier-arg") {
				args := slices.DeleteFunc(certifierArgs, func(a string) bool { return a == "" })
				o.CertifierArgs = &args
			}
			if f.Changed("agent-arg") {
				args := slices.DeleteFunc(agentArgs, func(a string) bool { return a == "" })
				o.AgentArgs = &args
			}
			out := cmd.OutOrStdout()
			o.Progress = out
			st, err := cluster.Up(cmd.Context(), o)
			if err != nil {
				if st != nil {
					err = fmt.Errorf("%w\n\nWhat did start is recorded in %s; stop it with `tashkent down --data-dir %s`",
						err, cluster.StatePath(st.Dir), st.Dir)
				}
				return err
			}
			st.WriteEndpoints(out)
			if noDemo {
				return nil
			}
			if len(st.Halted) > 0 {
				fmt.Fprintf(out, "\nNo demo: %s halted (above).\n", strings.Join(st.Halted, ", "))
				return nil
			}
			_, err = demo.Run(cmd.Context(), st, demo.Config{Duration: demoDuration, Out: out, Live: isTerminal(os.Stdout)})
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "data-dir", "", "cluster directory (created if missing; reused if it holds a cluster)")
	f.IntVar(&o.Replicas, "replicas", cluster.DefaultReplicas, "number of replicas of a new cluster; "+
		"an existing cluster grows to it (tashkent replica add) or shrinks (tashkent replica remove, highest index first, data kept)")
	f.StringVar(&mode, "mode", string(cluster.ModeMW), "durability placement of a new cluster: mw (certifier log), base (each replica's WAL) or ed (mw answered at the commit point: "+
		"synchronous_commit on acknowledges once durable, off at once; single certifier)")
	f.IntVar(&o.CertifierPort, "certifier-port", 0, "certifier gRPC port on 127.0.0.1 (0: a free port)")
	f.IntVar(&o.BasePort, "base-port", 0, "PostgreSQL port of the first replica; replica K listens on base-port+K-1 (0: free ports)")
	f.IntVar(&o.Certifiers, "certifiers", 0, "certifier group size of a new cluster: 1, or 3 or 5 members replicated with Raft (Tashkent §7.3)")
	f.BoolVar(&o.CertifierTLS, "certifier-tls", false, "a new cluster uses mutual TLS between agents and certifiers and among certifiers, "+
		"with a CA and per-process certificates generated in DATA-DIR/certifier-tls (recorded in cluster.json)")
	f.BoolVar(&trustDDLRoles, "trust-ddl-roles", false, "run the agents with --trust-ddl-roles: roles that are not superusers may run DDL, "+
		"whose column defaults, index expressions and ALWAYS triggers the other replicas' appliers then run as a superuser, so only if every such role is trusted as one (recorded in cluster.json; "+
		"to change it on an existing cluster, run tashkent down first)")
	f.BoolVar(&autoRebuild, "auto-rebuild", true, "run the supervisor, which rebuilds a replica whose agent halted "+
		"(recorded in cluster.json; a new cluster has it on)")
	f.StringArrayVar(&certifierArgs, "certifier-arg", nil, "a flag of every certifier up starts, after its config file, e.g. "+
		"--certifier-arg=--log-retention-bytes=1073741824 (repeatable; recorded in cluster.json; --certifier-arg= clears them; "+
		"a running certifier takes them when up next starts it)")
	f.StringArrayVar(&agentArgs, "agent-arg", nil, "a flag of every agent up starts, after its config file, e.g. "+
		"--agent-arg=--apply-backlog-bytes=67108864 (repeatable; recorded in cluster.json; --agent-arg= clears them; "+
		"a running agent takes them when up next starts it)")
	f.BoolVar(&noDemo, "no-demo", false, "skip the demo workload")
	f.DurationVar(&demoDuration, "demo-duration", 5*time.Second, "how long the demo runs transfers")
	f.DurationVar(&o.ReadyTimeout, "ready-timeout", cluster.DefaultReadyTimeout, "how long to wait for each process to be ready (an agent: until its replica has caught up and admits clients)")
	return cmd
}

// isTerminal reports whether f is a character device (a terminal), where a
// progress line can be rewritten in place.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
