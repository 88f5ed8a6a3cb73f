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
		Short: "Show the local cluster: versions, lag, processes, certifier figures, connection URIs",
		Long: `Reads DATA-DIR/cluster.json and probes every process: whether each PostgreSQL,
proxy and the certifier runs, each replica's version (read from its
database) and lag behind the certifier's durable version, and the certifier's
version, durable version, entries per fsync and abort rate.`,
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
