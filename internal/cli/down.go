package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

func init() { extraCommands = append(extraCommands, newDownCommand) }

func newDownCommand() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster started by `tashkent up`",
		Long: `Stops every process recorded in DATA-DIR/cluster.json: the agents (each
closes its replica's admission gate), then the certifiers, then PostgreSQL
(fast shutdown). Each recorded PID is checked to
still be that process before it is signalled. Data stays; ` + "`tashkent up`" + `
on the same directory starts the cluster again. Running down twice is fine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--data-dir is required: the directory that holds the cluster")
			}
			report, err := cluster.Down(cmd.Context(), dir)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if report == nil {
					report = []cluster.Stopped{}
				}
				if jerr := enc.Encode(report); jerr != nil {
					return jerr
				}
			} else {
				for _, s := range report {
					fmt.Fprintln(out, s)
				}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "data-dir", "", "cluster directory (as given to tashkent up)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "report as JSON")
	return cmd
}
