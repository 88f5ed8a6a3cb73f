// Package cli holds the cobra commands of the tashkent binary. Commands parse
// flags, build a Config for the package that does the work, and run it; no
// logic of the product lives here.
package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

type globalFlags struct {
	logLevel    string
	logFormat   string
	cpuProfile  string
	maxProcs    int
	stopProfile func()
}

// Execute runs the command line and returns the process exit code.
func Execute() int {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "tashkent",
		Short:         "Multi-master PostgreSQL with snapshot isolation across replicas",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// First: the file may set any flag, the global ones too.
			if err := applyConfigFile(cmd); err != nil {
				return err
			}
			if g.cpuProfile != "" {
				stop, err := startCPUProfile(g.cpuProfile)
				if err != nil {
					return err
				}
				g.stopProfile = stop
			}
			if err := g.setupLogging(); err != nil {
				return err
			}
			return setMaxProcs(cmd, g.maxProcs)
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if g.stopProfile != nil {
				g.stopProfile()
			}
		},
	}
	root.PersistentFlags().StringVar(&g.cpuProfile, "cpu-profile", "", "write a Go CPU profile of the command to this file")
	root.PersistentFlags().MarkHidden("cpu-profile")
	root.PersistentFlags().IntVar(&g.maxProcs, "max-procs", 0,
		"Go threads running code at once (GOMAXPROCS); 0: automatic (half the CPUs for the agent, which shares its host with PostgreSQL, and for a certifier run with --shares-host; all for other commands)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "text or json")
	root.AddCommand(newCertifierCommand(), newCertifierBenchCommand())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	keepSysmonPollingFor(root, os.Args[1:]) // before signal.NotifyContext: see there
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tashkent:", err)
		return 1
	}
	return 0
}

// extraCommands lets other files of this package add commands.
var extraCommands []func() *cobra.Command

func (g *globalFlags) setupLogging() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch g.logFormat {
	case "text":
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, opts)))
	case "json":
		slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, opts)))
	default:
		return fmt.Errorf("--log-format must be text or json, not %q", g.logFormat)
	}
	return nil
}
