package compat

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/proxy"
)

// The role the suites connect as: a superuser (tables created through one
// proxy are created on the other replicas by the proxies' admin connection,
// so the role must be able to use tables it does not own) that
// authenticates with SCRAM-SHA-256.
const (
	compatUser     = "compat"
	compatPassword = "compat-pw-Ünï"
	compatDatabase = "postgres"
)

// target is where a suite runs: two ports of one server (direct), or two
// proxies of one cluster.
type target struct {
	name        string // "direct" or "cluster"
	host        string
	port, port2 int
}

// compatCluster is the direct server and the three-replica cluster: real
// PostgreSQL 15 servers, an in-process certifier and an in-process proxy per
// replica (the harness of internal/proxy's tests, cluster_test.go).
type compatCluster struct {
	direct  *pgserver.Server
	dbs     []*pgserver.Server
	cert    *certifier.Server
	proxies []*proxy.Proxy
	logPath string
}

func startAll(t *testing.T, replicas int) *compatCluster {
	t.Helper()
	c := &compatCluster{}
	c.logPath = filepath.Join(t.TempDir(), "tashkent.log")
	logFile, err := os.Create(c.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tail of the proxies' and certifier's log (%s; COMPAT_LOG_LEVEL=debug for more):\n%s", c.logPath, tailFile(c.logPath, 12000))
		}
		logFile.Close()
	})
	level := slog.LevelInfo
	if s := os.Getenv("COMPAT_LOG_LEVEL"); s != "" {
		if err := level.UnmarshalText([]byte(s)); err != nil {
			t.Fatalf("COMPAT_LOG_LEVEL: %v", err)
		}
	}
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: level}))

	c.direct = pgtest.Start(t)
	for range replicas {
		c.dbs = append(c.dbs, pgtest.Start(t, pgtest.SynchronousCommitOff()))
	}
	for _, db := range append([]*pgserver.Server{c.direct}, c.dbs...) {
		addSCRAMRole(t, db)
	}

	c.cert, err = certifier.Listen(certifier.Config{DataDir: t.TempDir(), Logger: logger.With("component", "certifier")}, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cert.Close() })
	for i, db := range c.dbs {
		p, err := proxy.New(proxy.Config{
			Name: fmt.Sprintf("replica%d", i+1), Listen: "127.0.0.1:0",
			BackendAddr: fmt.Sprintf("127.0.0.1:%d", db.Port()), Certifier: c.cert.Addr().String(),
			Mode: proxy.ModeMW, Logger: logger.With("component", fmt.Sprintf("proxy%d", i+1)),
			AllowPasswordlessLogins: true, // pgtest's PostgreSQL trusts local connections
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx, "") }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Logf("proxy %d: %v", i+1, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("proxy %d did not stop", i+1)
			}
		})
		select {
		case <-p.Ready():
		case err := <-done:
			done <- err // for the cleanup above
			t.Fatalf("proxy %d did not start: %v", i+1, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("proxy %d did not start in 60s", i+1)
		}
		c.proxies = append(c.proxies, p)
	}
	return c
}

func (c *compatCluster) targets() []target {
	return []target{
		{name: "direct", host: "127.0.0.1", port: c.direct.Port(), port2: c.direct.Port()},
		{name: "cluster", host: "127.0.0.1", port: proxyPort(c.proxies[0]), port2: proxyPort(c.proxies[1])},
	}
}

func proxyPort(p *proxy.Proxy) int {
	return p.Addr().(*net.TCPAddr).Port
}

// addSCRAMRole creates the suites' role on one server (directly, before any
// proxy runs) and makes it authenticate with SCRAM-SHA-256 from 127.0.0.1.
func addSCRAMRole(t *testing.T, db *pgserver.Server) {
	t.Helper()
	hba := filepath.Join(db.DataDir(), "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatalf("read %s: %v", hba, err)
	}
	lines := fmt.Sprintf("# compat suites: password authentication for %[1]s\nhost all %[1]s 127.0.0.1/32 scram-sha-256\nhost all %[1]s ::1/128 scram-sha-256\n", compatUser)
	// WriteFile keeps the file's owner (postgres) and mode.
	if err := os.WriteFile(hba, append([]byte(lines), old...), 0o600); err != nil {
		t.Fatalf("write %s: %v", hba, err)
	}
	conn := pgtest.Connect(t, db, "postgres")
	ctx := context.Background()
	for _, sql := range []string{
		"SET password_encryption = 'scram-sha-256'",
		fmt.Sprintf("CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'", compatUser, compatPassword),
		"SELECT pg_reload_conf()",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The reload is asynchronous: wait until a wrong password is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		cfg, _ := pgx.ParseConfig(fmt.Sprintf("postgres://%s:wrong@127.0.0.1:%d/%s?sslmode=disable", compatUser, db.Port(), compatDatabase))
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err != nil && strings.Contains(err.Error(), "28P01") {
			return
		}
		if c != nil {
			c.Close(ctx)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pg_hba.conf reload: a wrong password still gives %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func itoa(i int) string { return strconv.Itoa(i) }
