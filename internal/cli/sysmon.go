package cli

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tashkent-db/tashkent/internal/configfile"
)

// Go's runtime runs a monitor thread, sysmon, that takes processors back
// from goroutines blocked in system calls and preempts long-running ones.
// When every processor is idle, sysmon parks on a futex, and the first
// goroutine that enters a system call afterwards wakes it
// (runtime.entersyscallWakeSysmon); sysmon then polls every 20 µs until
// the process is idle again and parks once more. An agent or a certifier
// serving a client one request at a time goes idle between requests, so
// every request pays a futex wake-up of sysmon and a few context switches
// of its own, and on a virtual machine a context switch costs tens of
// microseconds (docs/BENCHMARKS.md, "Go's sysmon"; see also
// golang/go#18236).
//
// sysmon never parks while GODEBUG's schedtrace is above 0 (runtime
// proc.go, sysmon: it has to print the trace on time): it keeps polling,
// every 20 µs at first, then, after 50 rounds in which it took nothing
// back (about 1 ms), doubling up to 10 ms, without being woken by anyone.
// The costs of that:
//   - An idle server wakes about 100 times a second (sysmon's 10 ms
//     rounds), where the default parks until there is work.
//   - sysmon, at 10 ms then, takes a processor back from a blocking system
//     call 10-20 ms after the call began. The default, which the first
//     system call after an idle spell wakes with its delay reset to 20 µs,
//     does so within a fraction of a millisecond. With GOMAXPROCS=1 no
//     other goroutine runs until such a call returns: a certifier's
//     fdatasync, for one. So a certifier on a host of its own polls only
//     with several Go threads; one beside the replicas polls with one too
//     (pollUnlessAlone); the agent makes no blocking call on its path and
//     always polls.
//   - Every fatal error (unrecovered panic, runtime throw, SIGQUIT) first
//     prints a detailed scheduler dump, one line per P, M and goroutine,
//     before the panic message (runtime panic.go, startpanic_m).
//
// schedtrace's largest value, 2147483647 ms (24.86 days), keeps the
// periodic trace quiet. sysmon prints its line ("SCHED ...") on stderr
// once CLOCK_MONOTONIC, the host's time since boot, is past 24.86 days:
// at start on a host up for longer than that, else when the host's
// uptime crosses it; then every 24.86 days after that line. The runtime
// reads schedtrace only when the process starts, so a server command
// executes itself again with it set: same PID, same arguments, and the
// inherited descriptors (Go opens its own with close-on-exec). A GODEBUG
// that already sets schedtrace, as the runtime reads it, is left as it
// is; GODEBUG=schedtrace=0 turns this off.
const (
	// pollingSysmon is the annotation of server commands that keep sysmon
	// polling; its value is when (pollAlways or pollUnlessAlone).
	pollingSysmon = "tashkent/polling-sysmon"
	// pollAlways: the command makes no blocking system call on its request
	// path (the agent: sockets only), so a slow retake costs it nothing.
	pollAlways = "always"
	// pollUnlessAlone: the command blocks in system calls on its request
	// path (the certifier's log flush). With several Go threads it polls.
	// With one, polling lets a flush hold the thread: a request that
	// arrives during it is read, and a reply written, once it returns. For
	// a certifier on an 8 ms disk that costs a flush: client p99 58-97 ms
	// polling against 21-82 ms by default (certifier-bench --rate 200, 4
	// clients); so a certifier on a host of its own with one thread keeps
	// the default. Beside the replicas (--shares-host: tashkent up, the
	// bench on the real disk) it polls: a flush there takes 0.1-0.5 ms, and
	// the default would wake sysmon, which then polls every 20 µs, at every
	// request: the certifier's CPU per certification was 124 µs by default
	// and 69-74 µs polling (certifier-bench --rate 2000, 8 clients, one
	// replica stream, two cores), and one polling thread instead of two
	// cut it from 68-75 to 47-50 µs per TPC-B commit (8 clients), with the
	// cross-thread wake-ups of every group commit gone.
	pollUnlessAlone = "unless-alone"
	// sysmonSetting is the GODEBUG setting that keeps sysmon polling.
	sysmonSetting = "schedtrace=2147483647"
)

// markPollingSysmon annotates a server command to run with sysmon polling
// when the condition (pollAlways or pollUnlessAlone) holds.
func markPollingSysmon(cmd *cobra.Command, when string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[pollingSysmon] = when
	return cmd
}

// pollsSysmon reports whether cmd, run with args (its own, after the
// command's name), should keep sysmon polling.
func pollsSysmon(cmd *cobra.Command, args []string) bool {
	switch cmd.Annotations[pollingSysmon] {
	case pollAlways:
		return true
	case pollUnlessAlone:
		threads, sharesHost := threadsAndHost(args)
		return threads > 1 || sharesHost
	}
	return false
}

// threadsAndHost reads what a command run with args will have: the Go
// threads running code at once when it does not share its host
// (--max-procs if positive, else the max-procs of the --config file, else
// the runtime's GOMAXPROCS as it stands before setMaxProcs: the GOMAXPROCS
// variable, or the CPUs and CPU limit the process may use), and whether
// it shares its host with PostgreSQL (--shares-host, on the command line
// or in the file). It reads only --max-procs, --shares-host
// and --config and skips every other flag; cobra parses them all, and
// reports their errors and the file's, afterwards.
func threadsAndHost(args []string) (int, bool) {
	fs := pflag.NewFlagSet("max-procs", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	n := fs.Int("max-procs", 0, "")
	shares := fs.Bool(sharesHostFlag, false, "")
	config := fs.String(configFlag, "", "")
	if err := fs.Parse(args); err != nil {
		return runtime.GOMAXPROCS(0), false
	}
	if *config != "" {
		fileProcs, fileShares := settingsIn(*config)
		if !fs.Changed("max-procs") {
			*n = fileProcs
		}
		if !fs.Changed(sharesHostFlag) {
			*shares = fileShares
		}
	}
	if *n > 0 {
		return *n, *shares
	}
	return runtime.GOMAXPROCS(0), *shares
}

// settingsIn is the max-procs (0: none) and shares-host the config file at
// path sets; zero values when it cannot be read (the command then reports
// why).
func settingsIn(path string) (maxProcs int, sharesHost bool) {
	settings, err := configfile.Read(path)
	if err != nil {
		return 0, false
	}
	for _, s := range settings {
		switch v := s.Value.(type) {
		case int64:
			if s.Key == "max-procs" {
				maxProcs = int(v)
			}
		case bool:
			if s.Key == sharesHostFlag {
				sharesHost = v
			}
		}
	}
	return maxProcs, sharesHost
}

// keepSysmonPollingFor applies keepSysmonPolling to the command that args
// select, found as cobra's Execute will find it. It must run before the
// process catches SIGTERM or SIGINT with signal.Notify: a signal caught in
// the first execution would be lost by the second (execve resets the
// handlers, and the Go handler had already taken the signal), which then
// runs on as if no stop had been asked. Before signal.Notify the runtime's
// default applies: such a signal ends the first execution, as a stop
// request should.
func keepSysmonPollingFor(root *cobra.Command, args []string) {
	if cmd, rest, err := root.Find(args); err == nil && pollsSysmon(cmd, rest) {
		keepSysmonPolling()
	}
}

// keepSysmonPolling executes the process again with sysmonSetting added to
// GODEBUG, unless GODEBUG sets schedtrace already. It returns only if
// nothing needs doing or the execution failed; then the process runs on
// with the runtime's default, after a warning.
func keepSysmonPolling() {
	godebug, add := withSysmonSetting(os.Getenv("GODEBUG"))
	if !add {
		return
	}
	self, err := os.Executable()
	if err == nil {
		env := append(withoutVariable(os.Environ(), "GODEBUG"), "GODEBUG="+godebug)
		err = syscall.Exec(self, os.Args, env) // returns only on failure
	}
	slog.Warn("could not execute this process again with Go's sysmon polling; it runs with the runtime's default, which costs CPU per request",
		"GODEBUG", godebug, "err", err, "hint", "set GODEBUG=schedtrace=0 to run with the default and skip this step")
}

// withSysmonSetting returns godebug with sysmonSetting added, and whether
// it added it: not if godebug sets schedtrace already, as the runtime
// reads it (runtime/runtime1.go, parsegodebug): fields split at commas,
// the key as it is, without trimming spaces, and a value that parses as a
// 32-bit integer. A setting the runtime would ignore (" schedtrace=1000",
// "schedtrace=abc") does not count: the process would run with neither.
func withSysmonSetting(godebug string) (string, bool) {
	for _, field := range strings.Split(godebug, ",") {
		key, value, _ := strings.Cut(field, "=")
		if _, err := strconv.ParseInt(value, 10, 32); key == "schedtrace" && err == nil {
			return godebug, false
		}
	}
	if godebug == "" {
		return sysmonSetting, true
	}
	return godebug + "," + sysmonSetting, true
}

// withoutVariable returns env without the entries of variable name.
func withoutVariable(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
