package pgwire

import (
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

func pgbenchPath(t *testing.T) string {
	for _, p := range []string{"/usr/bin/pgbench", pgBinDir + "/pgbench"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("pgbench not found (apt-get install postgresql-client-15)")
	return ""
}

var (
	pgbenchProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	pgbenchFailed    = regexp.MustCompile(`number of failed transactions: (\d+)`)
)

func TestPgbenchThroughRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("pgbench runs take 12 s")
	}
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})
	bin := pgbenchPath(t)
	host, port, _ := net.SplitHostPort(p.addr)
	run := func(args ...string) string {
		t.Helper()
		full := append([]string{"-h", host, "-p", port, "-U", "postgres"}, args...)
		full = append(full, "postgres")
		cmd := exec.Command(bin, full...)
		cmd.Env = append(os.Environ(), "PGSSLMODE=prefer", "PGCONNECT_TIMEOUT=10")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pgbench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("-i", "-s", "1", "-q")
	for _, mode := range []struct {
		mode, seconds string
	}{{"extended", "5"}, {"prepared", "5"}, {"simple", "2"}} {
		t.Run(mode.mode, func(t *testing.T) {
			out := run("-c", "4", "-j", "2", "-T", mode.seconds, "-M", mode.mode, "-n")
			m := pgbenchProcessed.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no transaction count in pgbench output:\n%s", out)
			}
			if n, _ := strconv.Atoi(m[1]); n < 100 {
				t.Fatalf("only %d transactions in %s s:\n%s", n, mode.seconds, out)
			}
			if f := pgbenchFailed.FindStringSubmatch(out); f != nil && f[1] != "0" {
				t.Fatalf("%s failed transactions:\n%s", f[1], out)
			}
			t.Logf("pgbench -M %s: %s transactions", mode.mode, m[1])
		})
	}
}
