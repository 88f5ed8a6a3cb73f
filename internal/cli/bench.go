package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/bench"
)

func init() { extraCommands = append(extraCommands, newBenchCommand) }

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that compare tashkent with PostgreSQL and its peers side by side, in one invocation",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newBenchPgbenchCommand())
	for _, w := range bench.Workloads {
		cmd.AddCommand(newBenchSuiteCommand(w))
	}
	return cmd
}

func newBenchPgbenchCommand() *cobra.Command {
	var (
		cfg     bench.Config
		clients string
		systems string
	)
	cmd := &cobra.Command{
		Use:   "pgbench",
		Short: "pgbench TPC-B: standalone PostgreSQL (synchronous_commit on, off) against tashkent mw and base",
		Long: `Starts, in a temporary directory and on free ports, every system it compares:

  sync-on   one PostgreSQL 15, synchronous_commit=on (the baseline of every ratio)
  sync-off  one PostgreSQL 15, synchronous_commit=off
  sync-on-rr  sync-on with every transaction at REPEATABLE READ (not run
            unless named): what snapshot isolation itself costs the workload
  mw        tashkent mode mw: --replicas PostgreSQL with the tashkent extension
            and synchronous_commit=off, a certifier (fsync on) and one agent
            per replica; clients connect to the replicas' PostgreSQL
  base      tashkent mode base: the same with synchronous_commit=on

loads the same TPC-B schema into each (pgbench_history gets a primary key, which
tashkent needs; a tashkent system's replicas are loaded before its agents start),
runs pgbench on each for every client count, alternating the systems
(A B C D A B C D) --repeat times, and prints the median tps, latency and the
ratio to sync-on measured in this same invocation. Clients of a tashkent system
with several replicas are spread over all its replicas (one pgbench per replica,
tps summed). Everything it started is stopped by PID at the end.

--fsync-delay D emulates slow disks (the paper's fsync took 8 ms): every PostgreSQL
runs with an LD_PRELOAD shim whose fsync/fdatasync sleep D after the real flush
(wal_sync_method pinned to fdatasync), and the certifier sleeps D after each log sync.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Clients, err = parseInts(clients); err != nil {
				return fmt.Errorf("--clients: %w", err)
			}
			cfg.Systems = nil
			for _, s := range strings.Split(systems, ",") {
				k, err := bench.ParseSystem(strings.TrimSpace(s))
				if err != nil {
					return fmt.Errorf("--systems: %w", err)
				}
				cfg.Systems = append(cfg.Systems, k)
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return fmt.Errorf("find the tashkent executable: %w", err)
			}
			cfg.Progress = cmd.ErrOrStderr()
			cfg.Live = isTerminal(os.Stderr)
			rep, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			rep.WriteTable(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&clients, "clients", "1,4,8,16", "comma-separated pgbench client counts")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of one measured run (whole seconds)")
	f.IntVar(&cfg.Scale, "scale", 1, "TPC-B scale factor (pgbench -s)")
	f.StringVar(&cfg.Protocol, "protocol", "prepared", "pgbench -M: simple, extended or prepared")
	f.StringVar(&cfg.Builtin, "builtin", "tpcb-like", "pgbench -b: tpcb-like, simple-update (no branch/teller hot rows) or select-only")
	f.IntVar(&cfg.Replicas, "replicas", 1, "replicas of each tashkent system")
	f.IntVar(&cfg.Certifiers, "certifiers", 1, "certifier of every tashkent system: 1 (single) or a Raft group of 3 or 5 members on loopback")
	f.IntVar(&cfg.Repeat, "repeat", 1, "runs of every (system, clients) cell, interleaved across systems; the table shows the median")
	f.StringVar(&systems, "systems", "sync-on,sync-off,mw,base", "systems to compare, in the order runs alternate")
	f.DurationVar(&cfg.Warmup, "warmup", 3*time.Second, "unmeasured pgbench run on every system after loading (0: none)")
	f.StringVar(&cfg.OutDir, "out", "", "also write pgbench.csv, pgbench-runs.csv and pgbench.md into this directory")
	f.DurationVar(&cfg.FsyncDelay, "fsync-delay", 0,
		"every durable flush (fsync/fdatasync) of every system takes this much longer, after the real flush: the slow-disk regime of Tashkent §9 (e.g. 2ms, 8ms); needs cc")
	f.BoolVar(&cfg.PerStatement, "per-statement", false, "run pgbench -r and print each statement's latency per system")
	f.StringVar(&cfg.ProfileDir, "profile-dir", "", "run every certifier and agent with --cpu-profile into this directory")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the temporary directory (data directories and logs) afterwards")
	return cmd
}
