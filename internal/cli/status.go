package cli

import (
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

func init() { extraCommands = append(extraCommands, newStatusCommand) }

func newStatusCommand() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the local cluster: versions, lag, admission gates, processes, certifier figures, connection URIs, dashboard URLs",
		Long: `Reads DATA-DIR/cluster.json and probes every process: whether each PostgreSQL,
agent and certifier runs, each replica's version (tashkent.committed_version(),
read from its database), its lag behind the certifier's durable version,
whether its admission gate lets clients in (and why not), what its agent
says of itself (/healthz), the certifier's version, durable version,
entries per fsync and abort rate, and the URLs of the dashboard (a live
page every agent and certifier serves on its metrics port).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--data-dir is required: the directory that holds the cluster")
			}
			st, err := cluster.GetStatus(cmd.Context(), dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			st.WriteTable(out)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "data-dir", "", "cluster directory (as given to tashkent up)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
