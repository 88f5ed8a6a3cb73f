package cli

import (
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

func init() { extraCommands = append(extraCommands, newSuperviseCommand) }

func newSuperviseCommand() *cobra.Command {
	var o cluster.SuperviseOptions
	cmd := &cobra.Command{
		Use:   "supervise",
		Short: "Rebuild the replicas of a local cluster whose agents halt (tashkent up starts it)",
		Long: `Watches the cluster in --data-dir: every --interval it asks each replica's
agent for /healthz, and rebuilds a replica whose agent halted (it stopped
applying the cluster's commits and must be rebuilt) as tashkent replica
rebuild does, from the serving replica with the highest version. tashkent up
starts it detached (output in DATA-DIR/supervisor.log) unless the cluster
runs with --auto-rebuild=false; tashkent down stops it. It restarts nothing
else.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Dir == "" {
				return errors.New("--data-dir is required: the directory that holds the cluster")
			}
			o.Out = os.Stderr
			o.Log = slog.Default()
			return cluster.Supervise(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Dir, "data-dir", "", "cluster directory (as given to tashkent up)")
	cmd.Flags().DurationVar(&o.Interval, "interval", cluster.SuperviseIntervalDefault, "how often to look at the agents")
	return withConfigFile(cmd)
}
