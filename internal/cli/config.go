package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tashkent-db/tashkent/internal/configfile"
)

// The long-running commands (agent, certifier) start from a config file:
// `tashkent agent --config FILE`. Its keys are the command's flags,
// spelled as they are (internal/configfile), so one mechanism serves
// every such command: root's PersistentPreRunE applies the file to the
// parsed flags before anything reads them, skipping the flags the command
// line gave, and --print-config prints the result instead of running.
const (
	configFlag      = "config"
	printConfigFlag = "print-config"
)

// notConfigKeys are the flags a config file cannot set.
var notConfigKeys = []string{configFlag, printConfigFlag, "help"}

// withConfigFile gives a long-running command --config and --print-config.
func withConfigFile(cmd *cobra.Command) *cobra.Command {
	f := cmd.Flags()
	f.String(configFlag, "", "read the flags from this TOML file (keys are the flag names; flags given on the command line override it)")
	f.Bool(printConfigFlag, false, "print the effective configuration (defaults, the --config file, the command line) as a config file and exit")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if printing, _ := cmd.Flags().GetBool(printConfigFlag); printing {
			return printConfig(cmd)
		}
		return run(cmd, args)
	}
	return cmd
}

// applyConfigFile sets cmd's flags from its --config file, if it has one.
func applyConfigFile(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup(configFlag)
	if f == nil || f.Value.String() == "" {
		return nil
	}
	return configfile.Apply(cmd.Flags(), f.Value.String(), notConfigKeys...)
}

func printConfig(cmd *cobra.Command) error {
	settings, err := configfile.Effective(cmd.Flags(), notConfigKeys...)
	if err != nil {
		return err
	}
	source := "the defaults and the command line"
	if file, _ := cmd.Flags().GetString(configFlag); file != "" {
		source = fmt.Sprintf("the defaults, %s and the command line", file)
	}
	header := fmt.Sprintf("%s: the effective configuration, from %s.\nUse it as a config file: %s --config FILE.",
		cmd.CommandPath(), source, cmd.CommandPath())
	return configfile.Encode(cmd.OutOrStdout(), header, settings)
}
