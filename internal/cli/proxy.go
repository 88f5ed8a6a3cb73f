package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/proxy"
	"github.com/tashkent-db/tashkent/internal/replica"
)

func init() { extraCommands = append(extraCommands, newProxyCommand) }

func newProxyCommand() *cobra.Command {
	var (
		cfg     proxy.Config
		mode    string
		auth    string
		capture string
		metrics string
		certTLS grpctls.Files
	)
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the proxy in front of one PostgreSQL replica",
		Long: `Runs the transparent proxy of one replica (Tashkent §6.2). Clients connect
to it with any PostgreSQL client, as to the database itself. It installs
tashkent's capture triggers in the replicated database, certifies every
update transaction with the certifier, applies the other replicas' writesets
in the global commit order, and recovers the replica after its database
restarts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Name == "" || cfg.BackendAddr == "" {
				return errors.New("--name and --backend are required")
			}
			cfg.Mode = proxy.Mode(mode)
			cfg.Auth = proxy.AuthMode(auth)
			var err error
			if cfg.Capture, err = replica.ParseCapture(capture); err != nil {
				return err
			}
			cfg.AdminPassword = os.Getenv("TASHKENT_ADMIN_PASSWORD")
			cfg.Logger = slog.Default().With("replica", cfg.Name)
			dial, err := certifierDial(certTLS)
			if err != nil {
				return err
			}
			cfg.CertifierDialOptions = []grpc.DialOption{dial}
			p, err := proxy.New(cfg)
			if err != nil {
				return err
			}
			return p.Run(cmd.Context(), metrics)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "this replica's name, unique in the cluster")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:6432", "address clients connect to")
	f.StringVar(&cfg.BackendAddr, "backend", "", "the PostgreSQL replica, host:port")
	f.StringVar(&cfg.Database, "database", "postgres", "the replicated database")
	f.StringVar(&cfg.AdminUser, "admin-user", "postgres", "superuser for the proxy's own connections (password from TASHKENT_ADMIN_PASSWORD)")
	f.StringVar(&cfg.Certifier, "certifier", "127.0.0.1:7400", "certifier address")
	f.StringVar(&mode, "mode", string(proxy.ModeMW), "durability placement: mw (certifier log) or base (each replica's WAL)")
	f.DurationVar(&cfg.Staleness, "staleness", 100*time.Millisecond, "the replica asks for remote writesets at least this often (a safety net: the certifier pushes each as soon as it is durable); also the database health check's interval")
	f.StringVar(&metrics, "metrics-listen", "", "Prometheus /metrics listen address; empty disables")
	f.IntVar(&cfg.ReplicaIndex, "replica-index", 0, "this replica's number, 1 to --sequence-stride, unique in the cluster: its sequences hand out only values congruent to it (0: the one recorded in the database)")
	f.IntVar(&cfg.SequenceStride, "sequence-stride", replica.SequenceStrideDefault, fmt.Sprintf("every sequence advances by this much; the most replicas the cluster can ever have (at most %d)", replica.SequenceStrideMax))
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate (chain) for clients' TLS connections; with --tls-key (none: SSL requests are declined)")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&auth, "auth", string(proxy.AuthRelay), "client authentication: relay (PostgreSQL authenticates through the proxy) or scram (the proxy verifies SCRAM-SHA-256 itself, then authenticates to PostgreSQL with the client's SCRAM key or by trust)")
	certTLS.AddFlags(f)
	f.StringVar(&capture, "capture", string(replica.CaptureAuto), `how the replica captures writes: auto builds the C capture on this machine (cc and the PostgreSQL server headers: postgresql-server-dev-15, or their directory in TASHKENT_PG_INCLUDEDIR), puts it in the replica's data directory and uses it if the server can load it, PL/pgSQL otherwise, with a warning; c: C or the proxy does not start; plpgsql: PL/pgSQL`)
	f.BoolVar(&cfg.TrustDDLRoles, "trust-ddl-roles", false, "let roles that are not superusers run DDL in this replica's database (refused with 42501 otherwise); the other replicas run replicated DDL as --admin-user, so such a role can gain superuser rights there: only if every role that can run DDL is trusted as a superuser")
	f.StringVar(&cfg.AuthFile, "auth-file", "", `with --auth scram: a user list file of "user" "SCRAM-SHA-256$..." lines, instead of pg_authid`)
	f.BoolVar(&cfg.AllowPasswordlessLogins, "allow-passwordless-logins", false, "with --auth relay: let clients in whose login PostgreSQL admits without asking for a password (trust, peer or ident on the proxy's connection to it); anyone who reaches the proxy's port can then log in as any role, the superuser included. Without it such logins are refused (28000). Only for a proxy that no untrusted client can reach")
	return markPollingSysmon(markSharesHost(cmd), pollAlways)
}
