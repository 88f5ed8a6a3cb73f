package cli

import (
	"encoding/json"
	"errors"
	"fmt"
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
superuser's connection string). Exits non-zero when any table differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			if n := report.Differences(); n > 0 {
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
