package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/certbench"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/netutil"
)

func newCertifierBenchCommand() *cobra.Command {
	var (
		cfg     certbench.Config
		clients string
		noSync  bool
		members int
		certTLS grpctls.Files
	)
	cmd := &cobra.Command{
		Use:   "certifier-bench",
		Short: "Load-test a certifier over its gRPC API with synthetic writesets (no PostgreSQL)",
		Long: `Drives a certifier with synthetic writesets and prints, per client count,
certifications per second, p50 and p99 latency (paced: from each request's due
time), the generator's own lateness (late p99), the certifier's own latency from
its metrics (srv p50/p99), abort rate and log entries per fsync. Without --target it starts a certifier of its own (this binary, in a
temporary directory, as a separate process) and stops it by PID afterwards;
with --members 3 or 5, a certifier group of that many processes (the load goes
to the leader; entries/fsync is the leader's Raft log). --target may list
every member of a running group, comma-separated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			counts, err := parseInts(clients)
			if err != nil {
				return fmt.Errorf("--clients: %w", err)
			}
			cfg.Clients = counts
			dial, err := certifierDial(certTLS)
			if err != nil {
				return err
			}
			if certTLS.Enabled() && cfg.Target == "" {
				return errors.New("--certifier-tls-* need --target: the certifier the bench starts itself runs without TLS")
			}
			cfg.DialOptions = []grpc.DialOption{dial}
			if cfg.Target == "" {
				metricsAddr, err := benchMetricsAddr(members)
				if err != nil {
					return err
				}
				target, stop, err := startBenchGroup(noSync, members, metricsAddr)
				if err != nil {
					return err
				}
				defer stop()
				cfg.Target = target
				if metricsAddr != "" {
					cfg.MetricsURL = "http://" + metricsAddr + "/metrics"
				}
			}
			_, err = certbench.Run(cmd.Context(), cfg, cmd.OutOrStdout())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Target, "target", "", "certifier address; empty starts one")
	f.StringVar(&cfg.MetricsURL, "target-metrics", "", "with --target: the certifier's metrics URL (http://host:port/metrics), to report its own latency beside the clients'")
	f.StringVar(&clients, "clients", "1,4,16,64,256", "comma-separated client counts, one step each")
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured time per step")
	f.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured time per step")
	f.IntVar(&cfg.Replicas, "replicas", 3, "replica streams the clients are spread over")
	f.IntVar(&cfg.Keys, "keys", 4, "rows per writeset")
	f.IntVar(&cfg.RowBytes, "row-bytes", 32, "bytes of row values per change")
	f.IntVar(&cfg.KeySpace, "key-space", 0, "distinct rows (0: every key unique, no conflicts)")
	f.Float64Var(&cfg.Rate, "rate", 0, "total requests per second (0: closed loop)")
	f.BoolVar(&noSync, "unsafe-no-fsync", false, "start the certifier without fsync (to see what fsync costs)")
	certTLS.AddFlags(f)
	f.IntVar(&members, "members", 1, "without --target: start a certifier group of this many members (Raft; 1 is a single certifier)")
	return cmd
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", part)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchMetricsAddr is where the bench's own single certifier serves its
// metrics, which the bench reads its latency from; none for a group.
func benchMetricsAddr(members int) (string, error) {
	if members > 1 {
		return "", nil
	}
	port, err := netutil.FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// startBenchCertifier runs `tashkent certifier` as a child process on a free
// port, with metrics on metricsAddr (empty: none), and returns its address
// and a function that stops it by PID.
func startBenchCertifier(noSync bool, metricsAddr string) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "tashkent-certifier-bench-")
	if err != nil {
		return "", nil, err
	}
	port, err := netutil.FreePort()
	if err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"certifier", "--data-dir", filepath.Join(dir, "log"), "--listen", addr, "--metrics-listen", metricsAddr, "--log-level", "warn"}
	if noSync {
		args = append(args, "--unsafe-no-fsync")
	}
	child := exec.Command(self, args...)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		child.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { child.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			child.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	if err := netutil.WaitListening(addr, 10*time.Second); err != nil {
		stop()
		return "", nil, errors.Join(errors.New("the bench's certifier did not start"), err)
	}
	fmt.Fprintf(os.Stderr, "started certifier pid %d on %s (data in %s)\n", child.Process.Pid, addr, dir)
	return addr, stop, nil
}
