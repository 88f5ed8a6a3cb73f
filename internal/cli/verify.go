package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/verify"
)

func init() { extraCommands = append(extraCommands, newVerifyCommand) }

func newVerifyCommand() *cobra.Command {
	var (
		dir      string
		replicas []string
		holdMax  time.Duration
		rows     int
		asJSON   bool
		repair   bool
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Compare the replicas' contents online, table by table, at one common version",
		Long: `Opens a snapshot at the same version on every replica, while the cluster
keeps committing: each replica's agent holds its commits after that version
for the few milliseconds the snapshots take (tashkent.hold_commits, at most
--hold-max). Then every replicated table is hashed in buckets of rows on all
replicas at once, and the buckets that differ are read row by row: a
difference is reported down to the primary keys (the row itself in a table
without one), with the replicas that differ from the majority.

Replicas come from DATA-DIR/cluster.json or from --replica NAME=URI (a
superuser's connection string). Exits non-zero when any table differs.

With --repair (a cluster of tashkent up only), the replicas that differ from
the majority are rebuilt from one that agrees with it everywhere (as
tashkent replica rebuild does), then the comparison runs again. Without a
majority in every difference nothing is rebuilt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repair && dir == "" {
				return errors.New("--repair needs --data-dir: it rebuilds replicas of a cluster of tashkent up")
			}
			rs, err := verifyTargets(dir, replicas)
			if err != nil {
				return err
			}
			o := verify.Options{Replicas: rs, HoldMax: holdMax, RowsShownMax: rows}
			if !asJSON {
				o.Progress = cmd.OutOrStdout()
			}
			report, err := verify.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(report); err != nil {
					return err
				}
			} else {
				report.WriteSummary(cmd.OutOrStdout())
			}
			n := report.Differences()
			if n > 0 && repair {
				return repairReplicas(cmd, dir, report, o)
			}
			if n > 0 {
				return fmt.Errorf("verify: %d table(s) differ between the replicas", n)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "data-dir", "", "cluster directory (as given to tashkent up)")
	f.StringArrayVar(&replicas, "replica", nil, "NAME=URI of a replica to compare (repeat; instead of --data-dir)")
	f.DurationVar(&holdMax, "hold-max", 10*time.Second, "longest a replica's commits stay held while the snapshots are taken")
	f.IntVar(&rows, "rows", 20, "differing rows listed per table at most")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&repair, "repair", false, "rebuild the replicas that differ from the majority from one that agrees, then compare again (--data-dir only)")
	return cmd
}

// verifyTargets are the replicas named by --replica, or those of the
// cluster in dir.
func verifyTargets(dir string, replicas []string) ([]verify.Replica, error) {
	switch {
	case dir != "" && len(replicas) > 0:
		return nil, errors.New("give --data-dir or --replica, not both")
	case len(replicas) > 0:
		return parseReplicas("--replica", replicas)
	case dir != "":
		st, err := cluster.Load(dir)
		if err != nil {
			return nil, err
		}
		var rs []verify.Replica
		for _, r := range st.Replicas {
			rs = append(rs, verify.Replica{Name: r.Name, DSN: r.DSN()})
		}
		return rs, nil
	}
	return nil, errors.New("--data-dir or --replica is required: which replicas to compare")
}

// parseReplicas reads NAME=URI values of flag.
func parseReplicas(flag string, values []string) ([]verify.Replica, error) {
	var rs []verify.Replica
	for _, v := range values {
		name, uri, ok := strings.Cut(v, "=")
		if !ok || name == "" || uri == "" {
			return nil, fmt.Errorf("%s %q: want NAME=URI", flag, v)
		}
		rs = append(rs, verify.Replica{Name: name, DSN: uri})
	}
	return rs, nil
}

// repairReplicas rebuilds the replicas that differ from the majority from
// one that agrees with it everywhere, then compares again.
func repairReplicas(cmd *cobra.Command, dir string, report *verify.Report, o verify.Options) error {
	odd, ok := report.Odd()
	if !ok {
		return errors.New("verify: the replicas differ without a majority in every difference; nothing is rebuilt: choose a donor and run tashkent replica rebuild --donor N")
	}
	st, err := cluster.Load(dir)
	if err != nil {
		return err
	}
	donor := agreeingReplica(st, odd)
	out := cmd.OutOrStdout()
	for _, name := range odd {
		i := slices.IndexFunc(st.Replicas, func(r *cluster.Replica) bool { return r.Name == name })
		if i < 0 {
			return fmt.Errorf("verify: %s is not a replica of the cluster in %s", name, dir)
		}
		r := st.Replicas[i]
		fmt.Fprintf(out, "rebuilding %s from %s, which agrees with the majority\n", name, donor.Name)
		if _, err := cluster.RebuildReplica(cmd.Context(), cluster.ReplicaOptions{Dir: dir, Donor: donor.Index, Progress: out}, r.Index); err != nil {
			return fmt.Errorf("verify: rebuild %s: %w", name, err)
		}
	}
	o.Progress = nil
	again, err := verify.Run(cmd.Context(), o)
	if err != nil {
		return err
	}
	again.WriteSummary(out)
	if n := again.Differences(); n > 0 {
		return fmt.Errorf("verify: %d table(s) still differ after the rebuild", n)
	}
	return nil
}

// agreeingReplica is a replica of the cluster not among odd.
func agreeingReplica(st *cluster.State, odd []string) *cluster.Replica {
	for _, r := range st.Replicas {
		if !slices.Contains(odd, r.Name) {
			return r
		}
	}
	return nil
}
