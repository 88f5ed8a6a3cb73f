package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/grpctls"
)

// addRetentionFlags: how much of its log a certifier keeps for replicas
// that are behind or away (certifier.RetentionPolicy).
func addRetentionFlags(f *pflag.FlagSet, p *certifier.RetentionPolicy) {
	d := certifier.DefaultRetentionPolicy
	f.Int64Var(&p.Bytes, "log-retention-bytes", d.Bytes,
		"most bytes of log kept for replicas that are behind or away; past it the oldest segments go, and a replica that needed them is rebuilt from a peer (-1: no bound)")
	f.Uint64Var(&p.Versions, "log-retention-versions", 0,
		"most versions of log kept (0: no bound)")
	f.DurationVar(&p.ReplicaTimeout, "log-retention-replica-timeout", d.ReplicaTimeout,
		"how long a replica that is away (no session) still holds the log; after it, it is rebuilt from a peer when it comes back (-1s: for ever)")
}

func newCertifierCommand() *cobra.Command {
	var (
		memoryLimit int64
		faults      groupFaults
		memberID    uint64
		peers       string
		join        bool
		cfg         certifier.Config
		listen      string
		metrics     string
		segmentMiB  int64
		certTLS     grpctls.Files
		snapshots   groupSnapshotFlags
	)
	cmd := &cobra.Command{
		Use:   "certifier",
		Short: "Run a certifier: certify writesets, assign the global commit order, keep the durable log",
		Long: `Runs a certifier (Tashkent §6.1). It certifies the writesets agents send,
assigns the global commit order, makes every committed writeset durable in its
log (one fsync for all pending entries: group commit) before answering, and
serves the log to replicas. Restarted, also after kill -9, it recovers exactly
the state it had acknowledged.

With --id and --peers it is one member of a certifier group replicated with
Raft (Tashkent §7.3): the leader certifies, a version is durable once a
majority holds it, and a new leader takes over when the leader dies. Agents
are given every member (--certifier a,b,c) and follow the leader.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.DataDir == "" {
				return errors.New("--data-dir is required: the directory that holds the certifier's log")
			}
			cfg.SegmentBytes = segmentMiB << 20
			if os.Getenv("GOGC") == "" {
				// The heap is mostly the conflict index, which lives for the
				// whole window: collecting at every doubling is wasted work.
				debug.SetGCPercent(400)
			}

			setMemoryLimit(memoryLimit)
			cfg.Logger = slog.Default()
			if cfg.UnsafeSkipConflictCheck {
				slog.Warn("UNSAFE: --unsafe-fault-skip-conflict-check is set: every writeset commits without a conflict check; " +
					"snapshot isolation is broken on purpose (fault-harness self-test only)")
			}
			if err := faults.check(peers); err != nil {
				return err
			}
			tlsServer, tlsDial, err := certifierTLS(certTLS)
			if err != nil {
				return err
			}
			if peers != "" {
				node, err := openGroupMember(cfg, memberID, peers, join, faults, tlsDial, snapshots)
				if err != nil {
					return err
				}
				cfg.Group = node
				if listen == defaultCertifierListen {
					listen = node.AddrOf(memberID) // a member listens where its peers dial it
				}
			}
			srv, err := certifier.Listen(cfg, listen, metrics, tlsServer...)
			if err != nil {
				return err
			}
			slog.Info("certifier ready", "listen", srv.Addr().String(), "metrics", metrics, "pid", os.Getpid(), "tls", certTLS.Enabled(),
				"data_dir", cfg.DataDir, "durable_version", srv.Service.DurableVersion())
			select {
			case <-cmd.Context().Done():
				slog.Info("certifier stopping")
			case <-srv.Service.Failed():
			}
			failure := srv.Service.Err()
			if err := srv.Close(); err != nil && failure == nil {
				return err
			}
			if failure != nil {
				return fmt.Errorf("certifier failed: %w", failure)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory of the durable log (created if missing)")
	f.StringVar(&listen, "listen", defaultCertifierListen, "gRPC listen address (a group member: its address in --peers)")
	f.Uint64Var(&memberID, "id", 0, "this member's id in the certifier group (with --peers)")
	f.StringVar(&peers, "peers", "", "every member of the certifier group, id=host:port,... (Raft, Tashkent §7.3); empty: a single certifier")
	f.BoolVar(&join, "join", false, "join an existing group with an empty log (after `tashkent certifier members add`)")
	f.StringVar(&metrics, "metrics-listen", "127.0.0.1:7401", "Prometheus /metrics listen address; empty disables")
	f.Bool(sharesHostFlag, false, "it runs on the host of PostgreSQL replicas (tashkent up): half the CPUs unless --max-procs, as the agent, and Go's sysmon polling also with one thread")
	f.Uint64Var(&cfg.WindowVersions, "window-versions", certification.DefaultWindowVersions,
		"versions kept in the conflict index; a transaction whose snapshot is older aborts")
	f.Int64Var(&memoryLimit, "memory-limit", certifierMemoryLimit, "soft limit of the certifier's memory in bytes (the Go runtime's GOMEMLIMIT, which wins if set): "+
		"near it, garbage is collected more often; 0: none")
	f.IntVar(&cfg.RecentEntriesMax, "recent-entries", 1<<16, "latest entries kept in memory for delivery to replicas")
	f.Int64Var(&segmentMiB, "segment-mib", 64, "log segment size in MiB")
	f.IntVar(&cfg.Limits.WritesetBytesMax, "writeset-bytes-max", certifier.DefaultLimits.WritesetBytesMax, "largest writeset accepted, in bytes")
	f.IntVar(&cfg.Limits.WritesetKeysMax, "writeset-keys-max", certifier.DefaultLimits.WritesetKeysMax, "most rows in one writeset")
	f.Int64Var(&cfg.StageBytesMax, "stage-bytes-max", certifier.DefaultStageBytesMax,
		"most bytes of streamed writesets held in the data directory's stage/ at once, waiting for their decision (a single certifier)")
	f.IntVar(&cfg.Limits.InFlightRequestsMax, "in-flight-max", certifier.DefaultLimits.InFlightRequestsMax, "most requests certified and not yet answered")
	f.BoolVar(&cfg.NoSync, "unsafe-no-fsync", false, "skip fsync: voids durability; for benchmarks only")
	f.BoolVar(&cfg.UnsafeSkipConflictCheck, "unsafe-fault-skip-conflict-check", false,
		"commit every writeset without a conflict check: breaks snapshot isolation; the fault harness's self-test only")
	_ = f.MarkHidden("unsafe-fault-skip-conflict-check")
	faults.addFlags(f)
	f.DurationVar(&cfg.SyncDelay, "unsafe-fault-fsync-delay", 0,
		"sleep this long after every sync of the log (an emulated slow disk, Tashkent §9): benchmarks only")
	_ = f.MarkHidden("unsafe-fault-fsync-delay")
	f.BoolVar(&cfg.UnsafeDeliverBeforeDurable, "unsafe-deliver-before-durable", false,
		"deliver entries to replicas before they are durable, replies still once durable (a single certifier): a replica that applied versions a crash then lost must be rebuilt; fault tests only")
	_ = f.MarkHidden("unsafe-deliver-before-durable")
	f.DurationVar(&cfg.UnsafeFaultWriteDelay, "unsafe-fault-write-delay", 0,
		"with --unsafe-deliver-before-durable: sleep this long before writing each batch, whose entries were delivered as they were decided, so that a kill -9 loses delivered versions; fault tests only")
	_ = f.MarkHidden("unsafe-fault-write-delay")
	addRetentionFlags(f, &cfg.Retention)
	certTLS.AddFlags(f)
	snapshots.addFlags(f)
	cmd.AddCommand(newCertifierMembersCommand())
	return withConfigFile(markPollingSysmon(cmd, pollUnlessAlone))
}
