package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/replica"
)

func init() { extraCommands = append(extraCommands, newAgentCommand) }

func newAgentCommand() *cobra.Command {
	var (
		memoryLimit int64
		cfg         agent.Config
		mode        string
		certTLS     grpctls.Files
		verifyPeers []string
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the agent of one PostgreSQL replica",
		Long: `Runs the agent beside one PostgreSQL replica that has the tashkent
extension loaded (shared_preload_libraries = 'tashkent'). The replica's
backends ask it to certify their writesets at commit, through a Unix socket
(the extension's tashkent.agent_socket, in the data directory by default).
It installs the extension in the replicated database, applies the other
replicas' writesets in the global commit order, makes local transactions
that block them give way (Tashkent §8.2), and catches the replica up from
the certifier's log after its database restarts (§7). Clients are admitted
once the replica has caught up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Name == "" {
				return errors.New("--name is required")
			}
			cfg.Mode = agent.Mode(mode)
			peers, err := parseReplicas("--verify-peer", verifyPeers)
			if err != nil {
				return err
			}
			cfg.VerifyPeers = peers
			cfg.NoFlowControl = cfg.FlowControlLimit == 0
			if cfg.AdminPassword == "" {
				cfg.AdminPassword = os.Getenv("TASHKENT_ADMIN_PASSWORD")
			}
			cfg.Logger = slog.Default().With("replica", cfg.Name)
			if !cmd.Flags().Changed("memory-limit") {
				memoryLimit = int64(cfg.ApplyBacklogBytes) + agentMemoryOverhead
			}
			setMemoryLimit(memoryLimit)
			dial, err := certifierDial(certTLS)
			if err != nil {
				return err
			}
			cfg.CertifierDialOptions = []grpc.DialOption{dial}
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "this replica's name, unique in the cluster")
	f.StringVar(&cfg.Certifier, "certifier", "127.0.0.1:7400", "certifier address, or every member of a certifier group, comma-separated")
	f.StringVar(&mode, "mode", string(agent.ModeMW), "durability placement: mw (certifier log; synchronous_commit=off), base (each replica's WAL; on) or ed (mw answered at the commit point; on, the user's choice of safe)")
	f.StringVar(&cfg.Database, "database", "postgres", "the replicated database")
	f.StringVar(&cfg.Postgres, "postgres", "", `the replica's PostgreSQL as a connection string ("host=/var/run/postgresql port=5432" or a postgres:// URL); its database is replaced by --database. Empty: libpq's defaults and PG* variables`)
	f.StringVar(&cfg.AdminUser, "admin-user", "", "superuser for the agent's connections (empty: the one --postgres names, or postgres); it must be in tashkent.recovery_roles")
	f.StringVar(&cfg.AdminPassword, "admin-password", "", "password of --admin-user (or TASHKENT_ADMIN_PASSWORD, which keeps it out of the process list)")
	f.StringVar(&cfg.Socket, "socket", "", "the Unix socket backends connect to (empty: the extension's tashkent.agent_socket, relative to the data directory)")
	f.StringVar(&cfg.MetricsAddr, "metrics", "", "listen address of Prometheus /metrics and /healthz; empty disables")
	f.DurationVar(&cfg.Staleness, "staleness", 100*time.Millisecond, "the replica asks the certifier for new versions at least this often (a safety net: the certifier pushes each as soon as it is durable); also the database health check's interval")
	f.DurationVar(&cfg.BlockerGrace, "blocker-grace", time.Second, "how long a doomed local transaction may keep blocking a remote writeset before its backend is terminated (one idle in its transaction block cannot be cancelled); a reader in the way has its query cancelled after it and its backend terminated after twice it")
	f.DurationVar(&cfg.VerifyEvery, "verify-every", 0, "compare this replica with the --verify-peer replicas this often, as tashkent verify does, and keep the result in the metrics (0: never)")
	f.StringArrayVar(&verifyPeers, "verify-peer", nil, "NAME=URI of a replica to compare with (repeat; a superuser's connection string)")
	f.DurationVar(&cfg.RefuseWritesAfter, "refuse-writes-after", 10*time.Second, "when the replica's apply made no progress for this long although versions wait, refuse its clients' writes (57P03) until it moves again; reads go on (0: never)")
	f.Int64Var(&memoryLimit, "memory-limit", 0, "soft limit of the agent's memory in bytes (the Go runtime's GOMEMLIMIT, which wins if set): "+
		"near it, garbage is collected more often; 0 when given: none; default --apply-backlog-bytes + 128 MiB")
	f.IntVar(&cfg.ApplyBacklogBytes, "apply-backlog-bytes", agent.DefaultApplyBacklogBytes, "most bytes of delivered versions the agent holds until they are applied; past it, it stops reading the certifier stream until the applier catches up")
	f.Uint64Var(&cfg.FlowControlLimit, "flow-control-limit", agent.DefaultFlowControlLimit, "flow control: when more remote versions than this wait to be applied on the replica, it asks the certifier to hold the other replicas' commits until half are left (0 turns it off)")
	f.IntVar(&cfg.ReplicaIndex, "replica-index", 0, "this replica's number, 1 to --sequence-stride, unique in the cluster: its sequences hand out only values congruent to it (0: the one recorded in the database)")
	f.IntVar(&cfg.SequenceStride, "sequence-stride", replica.SequenceStrideDefault, fmt.Sprintf("every sequence advances by this much; the most replicas the cluster can ever have (at most %d)", replica.SequenceStrideMax))
	f.BoolVar(&cfg.TrustDDLRoles, "trust-ddl-roles", false, "let roles that are not superusers run DDL in this replica's database; the other replicas run it as that role, but the column defaults, index expressions and ALWAYS triggers it creates run in their appliers as a superuser, so only if every role that can run DDL is trusted as one")
	certTLS.AddFlags(f)
	return withConfigFile(markPollingSysmon(markSharesHost(cmd), pollAlways))
}
