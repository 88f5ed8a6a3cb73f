package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/faults"
)

func init() { extraCommands = append(extraCommands, newCheckCommand) }

func newCheckCommand() *cobra.Command {
	var (
		profile   string
		dir       string
		duration  time.Duration
		faultList string
		selfTest  bool
		keep      bool
		seed      uint64
		certs     int
		fastShare int
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Fault-test a real 3-replica cluster: isolation (adya), bank, long fork, durability, convergence",
		Long: `Starts a 3-replica mw cluster of real processes, drives list-append, bank and
long-fork workloads with clients connected to every replica's PostgreSQL,
injects faults (kill -9 and restart of PostgreSQL, agents and the certifier;
kill -9 of one backend that holds the replica's commit turn, after which
PostgreSQL restarts every backend; SIGSTOP/SIGCONT; network partitions
between the agents and the certifier; clients that disconnect
mid-transaction), heals them and checks:

  - the list-append history with adya for strong-session snapshot isolation
    (G2-item, write skew, is allowed);
  - every bank read sums to the total and no balance is negative;
  - no long fork between replicas;
  - every acknowledged commit is present at the end;
  - replicas converge to equal versions and checksums within 30 s.

With --certifiers 3 (the long profile's default) the certifier is a Raft
group (Tashkent §7.3) and the certifier faults are the group's: kill -9 and
restart of the leader and of a follower, SIGSTOP/SIGCONT of the leader, the
leader cut from the other members, a follower cut off, a random
majority/minority split. The summary reports the longest time without an
acknowledged commit around each fault (the failover pauses).

With --profile ed the cluster runs mode ed (eventual durability): half of the
list-append transactions are fast (--fast-share), the certifier waits before
writing each batch so that its kill -9 fails versions, and every fast and safe
transaction's outcome is asked with tashkent.txn_state after the run: a failed
fast commit is :fail in adya's history, an acknowledged safe commit must be
durable, and no replica may keep a failed write. --profile ed-group does the
same against a 3-member certifier group whose members hear each other 50 ms
late, so that killing or cutting off the leader fails the versions it decided
that no other member received.

Then the detector self-test restarts the certifier (every member of a group)
with its conflict check disabled and requires the checkers to notice. Exits non-zero on any failure.
Histories, adya's reports, faults.txt and summary.json stay in --out.
Needs PostgreSQL 15 and adya (cargo install adya --locked).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := faults.Profile(profile)
			if err != nil {
				return err
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "tashkent-check-"); err != nil {
					return err
				}
				// PostgreSQL runs as the postgres user when we are root: it
				// must reach the data directories below.
				if err := os.Chmod(dir, 0o755); err != nil {
					return err
				}
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return fmt.Errorf("find the tashkent executable: %w", err)
			}
			cfg.Dir = filepath.Clean(dir)
			if cmd.Flags().Changed("duration") {
				cfg.Duration = duration
			}
			if cmd.Flags().Changed("certifiers") && certs != cfg.Certifiers {
				cfg.Certifiers = certs
				cfg.Faults = faults.FaultsFor(certs)
			}
			if cmd.Flags().Changed("faults") {
				if cfg.Faults, err = faults.ParseFaults(faultList, cfg.Certifiers); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("fast-share") {
				cfg.FastShare = fastShare
			}
			if cmd.Flags().Changed("self-test") {
				cfg.SelfTest = selfTest
			}
			if cmd.Flags().Changed("seed") {
				cfg.Seed = seed
			}
			cfg.KeepCluster = keep
			cfg.Progress = cmd.ErrOrStderr()
			sum, err := faults.Run(cmd.Context(), cfg)
			if sum != nil {
				sum.Write(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !sum.OK() {
				return errors.New("the fault test failed (see the summary above)")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&profile, "profile", "short", "short (about a minute, what CI runs), long (10 minutes of faults), ed (mode ed, fast and safe transactions, certifier kills that fail versions) or ed-group (ed against a certifier group, leader kills and cuts)")
	f.StringVar(&dir, "out", "", "output directory: the cluster, histories, adya reports, faults.txt, summary.json (default: a new temporary directory)")
	f.DurationVar(&duration, "duration", 0, "how long the workloads run under faults (default: the profile's)")
	f.StringVar(&faultList, "faults", "all", "comma-separated fault kinds, all or none (the kinds depend on --certifiers; see docs/RELIABILITY.md)")
	f.BoolVar(&selfTest, "self-test", true, "run the detector self-test (certifier without conflict check) after the checks")
	f.BoolVar(&keep, "keep-cluster", false, "leave the cluster running (stop it with tashkent down --data-dir OUT/cluster)")
	f.Uint64Var(&seed, "seed", 1, "seed of the workload and fault choices")
	f.IntVar(&fastShare, "fast-share", 50, "mode ed: the percentage of list-append transactions run fast (synchronous_commit = off)")
	f.IntVar(&certs, "certifiers", 0, "certifier group size: 1, 3 or 5 (default: the profile's, 1 short, 3 long)")
	return cmd
}
