package cli

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/spf13/cobra"
)

// sharesHost is the annotation of commands whose process runs on the same
// host as a PostgreSQL server it serves (the agent). Go's scheduler spins
// idle threads looking for work; on a small host that spinning takes CPU
// from PostgreSQL. Measured on 2 cores: one thread instead of two cut the
// CPU per pgbench transaction of the Go process beside PostgreSQL by about
// a fifth and the certifier's by a quarter.
const sharesHost = "tashkent/shares-host"

// sharesHostFlag is the certifier's --shares-host: it runs on the host of
// the PostgreSQL replicas (tashkent up, the bench), as the agent always
// does, and so takes half the CPUs too (and keeps sysmon polling with one
// thread: sysmon.go). A certifier on a host of its own keeps every CPU.
const sharesHostFlag = "shares-host"

// sharesItsHost reports whether cmd runs beside PostgreSQL: the agent
// always, the certifier when --shares-host says so.
func sharesItsHost(cmd *cobra.Command) bool {
	if cmd.Annotations[sharesHost] == "true" {
		return true
	}
	on, err := cmd.Flags().GetBool(sharesHostFlag)
	return err == nil && on
}

// markSharesHost annotates cmd as sharing its host with PostgreSQL.
func markSharesHost(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[sharesHost] = "true"
	return cmd
}

// setMaxProcs applies --max-procs: n > 0 is taken as it is; 0 means
// automatic: GOMAXPROCS from the environment if set, else half the CPUs
// (at least one) for a command that shares its host with PostgreSQL, all
// of them otherwise.
func setMaxProcs(cmd *cobra.Command, n int) error {
	switch {
	case n < 0:
		return fmt.Errorf("--max-procs must be 0 (automatic) or a positive number of threads, not %d", n)
	case n == 0 && os.Getenv("GOMAXPROCS") != "":
		return nil
	case n == 0 && sharesItsHost(cmd):
		n = max(1, runtime.NumCPU()/2)
	case n == 0:
		return nil
	}
	runtime.GOMAXPROCS(n)
	slog.Debug("Go threads running code at once", "max_procs", n, "cpus", runtime.NumCPU())
	return nil
}
