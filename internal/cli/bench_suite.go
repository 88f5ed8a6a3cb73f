package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/bench"
)

// newBenchSuiteCommand is `tashkent bench WORKLOAD`: one workload against
// every system of --systems, in one invocation.
func newBenchSuiteCommand(w bench.Workload) *cobra.Command {
	var (
		cfg       bench.SuiteConfig
		clients   string
		systems   string
		replicas  string
		fractions string
		shares    string
		isolation string
	)
	cmd := &cobra.Command{
		Use:   string(w),
		Short: "the " + string(w) + " workload against the systems of --systems, ratios from the same run",
		Long: `Starts every system of --systems itself (temporary directory, free ports), loads the
workload into each, runs it for every client count (contention: for every c of --c, mixed:
for every share of --fast-share, at the largest client count), alternating the systems --repeat times, and prints median tps,
latency, abort rate and ratios to the baseline measured in this same invocation. With --out,
writes CSV, Markdown and PNG figures there. Everything it started is stopped by PID.

Systems (KIND or KIND:N):
  sync-on, sync-off     one standalone PostgreSQL 15, synchronous_commit on / off
  sync-on-rr            sync-on with every transaction at REPEATABLE READ
  mw, base              tashkent, N replicas: PostgreSQL with the tashkent extension
                        (synchronous_commit off / on), a certifier and one agent per
                        replica; clients connect to the replicas' PostgreSQL
                        (without :N, one system per --replicas entry)
  mw-fast, mw-safe      tashkent in mode ed (eventual durability), as 'tashkent up --mode ed'
                        starts it; every client session runs with synchronous_commit off
                        (fast transactions) or on (safe transactions)
  mw-neworder-fast      mw-safe with TPC-C's NewOrder transactions fast (tpcc only: a
                        trigger on new_order sets synchronous_commit off for them)
  streaming             PostgreSQL streaming replication: primary + N-1 synchronous standbys (default N=3)
  pgpool-native         pgpool-II 4.3 native replication over N backends (default 3)
  pgpool-si             pgpool-II 4.3 snapshot-isolation mode over N backends (default 3)

--delay adds a one-way delay to the links between the hosts of each replicated system
(agent->certifier, standby->primary, pgpool->backends) through a user-space relay.
--certifiers 3 (or 5) gives every tashkent system a certifier group on loopback instead of one
certifier, every --certifier-arg to each member, the agents following its leader (not with --delay).
select-only is pgbench -S on TPC-B data with every client on the system's first server:
one replica of a running tashkent cluster against the same PostgreSQL alone.
--fsync-delay D emulates slow disks (the paper's fsync took 8 ms): every PostgreSQL runs
with an LD_PRELOAD shim (built with cc) whose fsync/fdatasync sleep D after the real
flush, wal_sync_method pinned to fdatasync, and the certifier sleeps D after each log sync.
contention is Kashi's (ED 4.4): one-row updates of 250 rows, a share c of them on the first
(1-c) of the rows (c = 0.5 is uniform), not retried: the table reports the abort rate.
mixed is ED 4.3: one INSERT per transaction, --fast-share percent of them fast (SET LOCAL
synchronous_commit = off) and the rest safe (= on); the table reports each kind's latency.
--rate offers a fixed load (pgbench -R), as the thesis's runs do (4000 tps).
tpcc is TPC-C by go-tpc (github.com/pingcap/go-tpc, built with 'go install' into the user's
cache directory on first use; TASHKENT_GO_TPC names another binary): --warehouses, the
clients are go-tpc threads; it reports tpmC, and latency and errors per transaction type.
--scaleout measures the writing overhead wo on the first mw system with 2+ replicas and fits
the scale-out model so(n) = n/(1+wo*w*(n-1)) (Jimenez-Peris et al. 2.1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			cfg.Workload = w
			if cfg.Clients, err = parseInts(clients); err != nil {
				return fmt.Errorf("--clients: %w", err)
			}
			reps, err := parseInts(replicas)
			if err != nil {
				return fmt.Errorf("--replicas: %w", err)
			}
			if cfg.Systems, err = bench.ParseSystemSpecs(systems, reps); err != nil {
				return fmt.Errorf("--systems: %w", err)
			}
			if cfg.ContentionFractions, err = parseFloats(fractions); err != nil {
				return fmt.Errorf("--c: %w", err)
			}
			if cfg.FastShares, err = parseFloats(shares); err != nil {
				return fmt.Errorf("--fast-share: %w", err)
			}
			if cfg.Isolation, err = parseIsolation(isolation); err != nil {
				return err
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return fmt.Errorf("find the tashkent executable: %w", err)
			}
			cfg.Progress = cmd.ErrOrStderr()
			cfg.Live = isTerminal(os.Stderr)
			rep, err := bench.RunSuite(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			rep.WriteTable(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&systems, "systems", "sync-on,sync-off,mw,base", "systems to compare (KIND or KIND:N), in the order runs alternate; the first is the baseline unless --baseline")
	f.StringVar(&replicas, "replicas", "1", "comma-separated replica counts of each tashkent system given without :N")
	f.StringVar(&clients, "clients", "1,4,8,16", "comma-separated client counts")
	f.StringVar(&fractions, "c", "0.5,0.6,0.7,0.8,0.9,0.95", "contention only: contention levels c (a share c of the updates goes to the first 1-c of the 250 rows)")
	f.StringVar(&shares, "fast-share", "0,25,50,75,100", "mixed only: shares of fast transactions, in whole percent")
	f.StringVar(&isolation, "isolation", "repeatable-read", "contention only: the transactions' isolation, repeatable-read or serializable (tashkent runs SERIALIZABLE as REPEATABLE READ)")
	f.Float64Var(&cfg.Rate, "rate", 0, "offered load in transactions per second over all clients (pgbench -R); 0: as fast as the clients go")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of one measured run (whole seconds)")
	f.IntVar(&cfg.Repeat, "repeat", 1, "runs of every cell, interleaved across systems; the table shows the median")
	f.DurationVar(&cfg.Warmup, "warmup", 3*time.Second, "unmeasured run on every system after loading (0: none)")
	f.IntVar(&cfg.Scale, "scale", 1, "TPC-B scale factor (tpcb and select-only)")
	if w == bench.TPCC {
		f.IntVar(&cfg.Warehouses, "warehouses", 1, "TPC-C warehouses (go-tpc tpcc prepare --warehouses)")
	}
	f.StringVar(&cfg.Protocol, "protocol", "prepared", "pgbench -M: simple, extended or prepared (pgbench workloads)")
	f.DurationVar(&cfg.Delay, "delay", 0, "one-way delay between the hosts of replicated systems (e.g. 500us, 2ms)")
	f.DurationVar(&cfg.FsyncDelay, "fsync-delay", 0,
		"every durable flush (fsync/fdatasync) of every system takes this much longer, after the real flush: the slow-disk regime of Tashkent §9 (e.g. 2ms, 8ms); needs cc")
	f.StringVar(&cfg.Baseline, "baseline", "", "label of the system ratios divide by (e.g. \"pg sync=on\"); default: the first")
	f.BoolVar(&cfg.ScaleOut, "scaleout", false, "measure wo and fit the scale-out model (needs a tashkent system with 2+ replicas)")
	f.DurationVar(&cfg.Staleness, "staleness", 0, "every tashkent agent's --staleness (how often a replica asks the certifier for versions it was not sent); 0: the agent's default")
	f.StringArrayVar(&cfg.AgentArgs, "agent-arg", nil, "an extra flag of every tashkent agent, e.g. --agent-arg=--blocker-grace=1s (repeatable; the header names them)")
	f.StringArrayVar(&cfg.CertifierArgs, "certifier-arg", nil, "an extra flag of every tashkent certifier, e.g. --certifier-arg=--max-procs=1 (repeatable; the header names them)")
	f.IntVar(&cfg.Certifiers, "certifiers", 1, "certifier of every tashkent system: 1 (single) or a Raft group of 3 or 5 members on loopback, every --certifier-arg to each (not with --delay)")
	f.BoolVar(&cfg.OneWriter, "one-writer", false, "send every client of a tashkent system to replica 1 (the others only apply), as streaming replication sends them to its primary")
	f.BoolVar(&cfg.Breakdown, "breakdown", false, "per run: CPU per committed transaction of every kind of process (PostgreSQL's client backends, agent sessions, the rest; agents; certifier), the agents' certifications and applies, aborts by cause, replica staleness")
	f.StringVar(&cfg.ProfileDir, "profile-dir", "", "run every certifier and agent with --cpu-profile into this directory (seeding does not go through them)")
	f.StringVar(&cfg.OutDir, "out", "", "write CSV, Markdown and PNG figures into this directory")
	f.StringVar(&cfg.Dir, "dir", "", "work directory for the systems (default: a new temporary one)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the temporary directory (data directories and logs) afterwards")
	return cmd
}

// parseIsolation reads --isolation.
func parseIsolation(s string) (string, error) {
	switch s {
	case "repeatable-read":
		return "repeatable read", nil
	case "serializable":
		return "serializable", nil
	}
	return "", fmt.Errorf("--isolation %q: want repeatable-read or serializable", s)
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		x, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}
