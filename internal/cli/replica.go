package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

// `tashkent replica add|remove|rebuild`: the replicas of a local cluster
// (internal/cluster replica_*.go; docs/OPERATIONS.md "Replicas").

func init() { extraCommands = append(extraCommands, newReplicaCommand) }

func newReplicaCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replica",
		Short: "Add, remove or rebuild a replica of a running local cluster",
	}
	cmd.AddCommand(newReplicaAddCommand(), newReplicaRemoveCommand(), newReplicaRebuildCommand())
	return cmd
}

// transferFlags are the flags of the commands that copy a donor.
func transferFlags(cmd *cobra.Command, o *cluster.ReplicaOptions) {
	f := cmd.Flags()
	f.StringVar(&o.Dir, "data-dir", "", "cluster directory (as given to tashkent up)")
	f.IntVar(&o.Donor, "donor", 0, "index of the replica to copy from (0: the serving replica with the highest version)")
	f.StringVar(&o.MaxRate, "max-rate", "", "most the copy reads from the donor per second, as pg_basebackup --max-rate takes it (e.g. 50M; empty: no limit)")
	f.BoolVar(&o.EmptyUnlogged, "empty-unlogged", false, "copy although the donor's unlogged tables hold rows: the copy holds them empty (pg_basebackup copies no unlogged rows), unlike the other replicas; without it the command refuses and names them")
	f.DurationVar(&o.ReadyTimeout, "ready-timeout", 10*time.Minute, "how long the copy may take to catch up from the certifier's log and admit clients")
}

func newReplicaAddCommand() *cobra.Command {
	var o cluster.ReplicaOptions
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add a replica: copy a donor's data directory while it serves, catch up from the log, admit clients",
		Long: `Adds a replica to the running cluster in --data-dir, with the next free index K
(DIR/replicaK). Its data directory is copied from a donor replica with
pg_basebackup while the donor keeps serving reads and writes; the copy's
progress (bytes, rate, ETA) is printed as it goes. The new replica is
recorded in cluster.json once the copy is complete; then its PostgreSQL and
agent start, and the agent catches it up from the certifier's log before
its gate admits clients.

Refused, before copying, while the donor's unlogged tables hold rows: a
physical copy holds them empty (see --empty-unlogged).

Interrupted (this command, the copy or the donor killed), nothing is
recorded and nothing of the new replica runs; run the command again: it
removes what the interrupted copy left and copies again from the start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Dir == "" {
				return errors.New("--data-dir is required: the directory that holds the cluster")
			}
			out := cmd.OutOrStdout()
			o.Progress = out
			st, r, err := cluster.AddReplica(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "\n%s serves: %s    %s\n", r.Name, r.URI(), r.PsqlCommand())
			fmt.Fprintf(out, "The cluster has %s. Status: tashkent status --data-dir %s\n", replicasCount(len(st.Replicas)), st.Dir)
			return nil
		},
	}
	transferFlags(cmd, &o)
	return cmd
}

func newReplicaRebuildCommand() *cobra.Command {
	var o cluster.ReplicaOptions
	cmd := &cobra.Command{
		Use:   "rebuild INDEX",
		Short: "Rebuild a replica from a donor's copy, keeping its index and port (e.g. one that halted)",
		Long: `Replaces the data directory of replica INDEX with a copy of a donor's, taken
with pg_basebackup while the donor serves, then catches it up from the
certifier's log; the replica keeps its index, name and port. The replica
runs on its old data until the copy is complete; then its agent and
PostgreSQL stop, the copy takes the old directory's place, and they start
again. The old data directory is kept in DIR/removed/replicaK-rebuilt-<time>/
until the replica's next rebuild. Refused, before copying, while the donor's unlogged tables hold rows
(see --empty-unlogged). Interrupted, the replica keeps (or gets back) its
old data; run the command again. With automatic rebuild on (tashkent up's default), the
supervisor does the same by itself when a replica's agent halts.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := replicaIndexArg(o.Dir, args[0])
			if err != nil {
				return err
			}
			o.Progress = cmd.OutOrStdout()
			st, err := cluster.RebuildReplica(cmd.Context(), o, k)
			if err != nil {
				return err
			}
			r := st.ReplicaByIndex(k)
			fmt.Fprintf(cmd.OutOrStdout(), "\n%s rebuilt from %s; it serves: %s\n", r.Name, r.Rebuilt.Donor, r.URI())
			return nil
		},
	}
	transferFlags(cmd, &o)
	return cmd
}

func newReplicaRemoveCommand() *cobra.Command {
	var o cluster.ReplicaOptions
	cmd := &cobra.Command{
		Use:   "remove INDEX",
		Short: "Take a replica out of the cluster: stop its agent and PostgreSQL, forget it",
		Long: `Stops the agent of replica INDEX (it closes the gate and ends its clients'
sessions), then its PostgreSQL, and removes it from cluster.json. Its
directory is moved to DIR/removed/replicaK-<time>/ (an ordinary PostgreSQL
data directory in pgdata/), or deleted with --delete-data. Its index is
free for a replica added later. The cluster's last replica cannot be
removed (use tashkent down).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := replicaIndexArg(o.Dir, args[0])
			if err != nil {
				return err
			}
			o.Progress = cmd.OutOrStdout()
			st, _, err := cluster.RemoveReplica(cmd.Context(), o, k)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "The cluster has %s.\n", replicasCount(len(st.Replicas)))
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Dir, "data-dir", "", "cluster directory (as given to tashkent up)")
	cmd.Flags().BoolVar(&o.DeleteData, "delete-data", false, "delete the replica's directory instead of moving it to DIR/removed/")
	return cmd
}

// replicaIndexArg checks --data-dir and the INDEX argument.
func replicaIndexArg(dir, arg string) (int, error) {
	if dir == "" {
		return 0, errors.New("--data-dir is required: the directory that holds the cluster")
	}
	k, err := strconv.Atoi(strings.TrimPrefix(arg, "replica"))
	if err != nil || k < 1 {
		return 0, fmt.Errorf("INDEX must be a replica's index, the K of replicaK (see tashkent status), not %q", arg)
	}
	return k, nil
}

// replicasCount is "1 replica" or "N replicas".
func replicasCount(n int) string {
	if n == 1 {
		return "1 replica"
	}
	return strconv.Itoa(n) + " replicas"
}
