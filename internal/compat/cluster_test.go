package compat

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// The role the suites connect as: a superuser (tables created on one
// replica are created on the others by their agents' appliers, so the
// role must be able to use tables it does not own, and its DDL must be
// replicated) that authenticates with SCRAM-SHA-256.
const (
	compatUser     = "compat"
	compatPassword = "compat-pw-Ünï"
	compatDatabase = "postgres"
)

// target is where a suite runs: two ports of one server (direct), or two
// replicas of one cluster.
type target struct {
	name        string // "direct" or "cluster"
	host        string
	port, port2 int
}

// compatCluster is the direct server (a plain PostgreSQL 15, without the
// extension) and a three-replica tashkent cluster (internal/clustertest:
// replicas with the extension, an in-process certifier and agents). The
// suites' clients connect to the replicas' PostgreSQL servers themselves.
type compatCluster struct {
	direct  *pgserver.Server
	cluster *clustertest.Cluster
}

func startAll(t *testing.T, replicas int, opts clustertest.Options) *compatCluster {
	t.Helper()
	c := &compatCluster{direct: pgtest.Start(t)}
	allowSCRAM(t, c.direct)
	verifier := scramVerifier(t, c.direct)

	c.cluster = clustertest.Start(t, replicas, opts)
	for _, db := range c.cluster.DBs {
		allowSCRAM(t, db)
	}
	// A role is replicated like DDL: created on replica 1, it reaches
	// the others in the global order.
	createSCRAMRole(t, c.cluster.DBs[0], verifier)
	c.cluster.AwaitConverged(30 * time.Second)
	for _, db := range append([]*pgserver.Server{c.direct}, c.cluster.DBs...) {
		awaitPasswordChecked(t, db)
	}
	return c
}

func (c *compatCluster) targets() []target {
	return []target{
		{name: "direct", host: "127.0.0.1", port: c.direct.Port(), port2: c.direct.Port()},
		{name: "cluster", host: "127.0.0.1", port: c.cluster.DBs[0].Port(), port2: c.cluster.DBs[1].Port()},
	}
}

// allowSCRAM makes the suites' role authenticate with SCRAM-SHA-256 from
// 127.0.0.1 (pg_hba.conf is each server's own file, never replicated).
func allowSCRAM(t *testing.T, db *pgserver.Server) {
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
	if _, err := pgtest.Connect(t, db, "postgres").Exec(context.Background(), "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
}

// createSCRAMRole creates the suites' role on db with the SCRAM
// verifier the direct server made of the password: on a replica the
// statement's text is what the other replicas run, and what the
// certifier's log keeps, so it carries the verifier, never the password.
func createSCRAMRole(t *testing.T, db *pgserver.Server, verifier string) {
	t.Helper()
	sql := fmt.Sprintf("CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'", compatUser, verifier)
	if _, err := pgtest.Connect(t, db, "postgres").Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// scramVerifier creates the suites' role on the direct server from its
// password and returns the verifier PostgreSQL stored.
func scramVerifier(t *testing.T, db *pgserver.Server) string {
	t.Helper()
	conn := pgtest.Connect(t, db, "postgres")
	ctx := context.Background()
	for _, sql := range []string{
		"SET password_encryption = 'scram-sha-256'",
		fmt.Sprintf("CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'", compatUser, compatPassword),
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var verifier string
	if err := conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", compatUser).Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(verifier, "SCRAM-SHA-256$") {
		t.Fatalf("the role's password is stored as %.20q..., want a SCRAM-SHA-256 verifier", verifier)
	}
	return verifier
}

// awaitPasswordChecked waits until db refuses a wrong password for the
// suites' role (the role has arrived and pg_hba.conf is reloaded).
func awaitPasswordChecked(t *testing.T, db *pgserver.Server) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cfg, _ := pgx.ParseConfig(fmt.Sprintf("postgres://%s:wrong@127.0.0.1:%d/%s?sslmode=disable", compatUser, db.Port(), compatDatabase))
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err != nil && strings.Contains(err.Error(), pgcode.InvalidPassword) {
			return
		}
		if c != nil {
			c.Close(ctx)
		}
		if time.Now().After(deadline) {
			t.Fatalf("server on port %d: a wrong password for %s still gives %v", db.Port(), compatUser, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
