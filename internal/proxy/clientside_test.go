package proxy_test

// Tests of what a client sees of the proxy's client side and of schema
// features: sequences offset per replica, TLS, SCRAM at the proxy, and the
// features refused because they would stay on one replica
// (docs/COMPATIBILITY.md).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/certs"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/proxy"
)

// startClusterWith is startCluster with each proxy's configuration passed
// through configure first.
func startClusterWith(t *testing.T, replicas int, configure func(i int, cfg *proxy.Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, mode: proxy.ModeMW}
	var err error
	c.certifier, err = certifier.Listen(certifier.Config{DataDir: t.TempDir()}, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.certifier.Close() })
	for i := range replicas {
		c.dbs = append(c.dbs, pgtest.Start(t, pgtest.SynchronousCommitOff()))
		cfg := proxy.Config{
			Name: fmt.Sprintf("replica%d", i+1), Listen: "127.0.0.1:0",
			BackendAddr: backendAddr(c.dbs[i]), Certifier: c.certifier.Addr().String(), Mode: c.mode,
			AllowPasswordlessLogins: true, // pgtest's PostgreSQL trusts local connections; configure may undo it
		}
		configure(i, &cfg)
		c.runProxy(i, cfg)
	}
	return c
}

// withReplicaIndex numbers the replicas 1, 2, 3, ... as tashkent up does.
func withReplicaIndex(i int, cfg *proxy.Config) { cfg.ReplicaIndex = i + 1 }

// One 3-replica cluster (replica indexes 1, 2, 3) for the schema features:
// starting clusters is the slow part of these tests.
func TestSchemaFeaturesAcrossReplicas(t *testing.T) {
	c := startClusterWith(t, 3, withReplicaIndex)
	t.Run("sequences never collide", func(t *testing.T) { sequencesNeverCollide(t, c) })
	t.Run("sequence restart is realigned", func(t *testing.T) { sequenceRestartIsRealigned(t, c) })
	t.Run("select for update then write", func(t *testing.T) { selectForUpdateThenWriteCommitsOnce(t, c) })
	t.Run("unreplicated features are refused", func(t *testing.T) { unreplicatedFeaturesAreRefused(t, c) })
}

// Every replica inserts into SERIAL, BIGSERIAL and identity columns at
// once, through its own proxy, in single-row autocommit statements and in
// multi-row transactions: no insert collides (no 40001, no 23505), every
// row arrives everywhere, and each replica's values are its own residue
// modulo the stride.
func sequencesNeverCollide(t *testing.T, c *testCluster) {
	const rounds = 20
	replicas := len(c.proxies)
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE s (id serial PRIMARY KEY, origin int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE b (id bigserial PRIMARY KEY, origin int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE i (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, origin int NOT NULL)`)
	// One sequence shared by two tables, created by DDL like the rest.
	execSQL(t, setup, `CREATE SEQUENCE shared`)
	execSQL(t, setup, `CREATE TABLE sh1 (id int PRIMARY KEY DEFAULT nextval('shared'), origin int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE sh2 (id int PRIMARY KEY DEFAULT nextval('shared'), origin int NOT NULL)`)
	c.converge(10 * time.Second)

	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, replicas)
	for r := range replicas {
		conn := c.connect(r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				for _, tbl := range []string{"s", "b", "i", "sh1", "sh2"} {
					if _, err := conn.Exec(ctx, `INSERT INTO `+tbl+` (origin) VALUES ($1)`, r+1); err != nil {
						errs <- fmt.Errorf("replica %d: insert into %s: %w", r+1, tbl, err)
						return
					}
				}
				if _, err := conn.Exec(ctx, `BEGIN; INSERT INTO s (origin) SELECT `+fmt.Sprint(r+1)+` FROM generate_series(1, 3); INSERT INTO i (origin) VALUES (`+fmt.Sprint(r+1)+`); COMMIT`); err != nil {
					errs <- fmt.Errorf("replica %d: transaction: %w", r+1, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.converge(20 * time.Second)

	want := map[string]int{"s": 4 * rounds * replicas, "b": rounds * replicas, "i": 2 * rounds * replicas,
		"sh1": rounds * replicas, "sh2": rounds * replicas}
	for tbl, n := range want {
		var rows, misplaced int
		err := c.direct(2).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE id % 16 <> origin) FROM `+tbl).Scan(&rows, &misplaced)
		if err != nil {
			t.Fatal(err)
		}
		if rows != n || misplaced != 0 {
			t.Fatalf("table %s: %d rows (want %d), %d with an id not congruent to their replica", tbl, rows, n, misplaced)
		}
	}
	var overlap int
	if err := c.direct(0).QueryRow(ctx, `SELECT count(*) FROM sh1 JOIN sh2 USING (id)`).Scan(&overlap); err != nil || overlap != 0 {
		t.Fatalf("the shared sequence gave %d ids to both tables (%v)", overlap, err)
	}
}

// A restart of the sequence on one replica is replicated as DDL and every
// replica realigns it to its own residue, past the restart value.
func sequenceRestartIsRealigned(t *testing.T, c *testCluster) {
	a := c.connect(0)
	execSQL(t, a, `CREATE TABLE t (id serial PRIMARY KEY, origin int)`)
	execSQL(t, a, `ALTER SEQUENCE t_id_seq RESTART WITH 1000`)
	c.converge(10 * time.Second)
	ctx := context.Background()
	for r := range c.proxies {
		var id int
		if err := c.connect(r).QueryRow(ctx, `INSERT INTO t (origin) VALUES ($1) RETURNING id`, r+1).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id < 1000 || id >= 1016 || id%16 != r+1 {
			t.Fatalf("replica %d: first id after RESTART WITH 1000 is %d", r+1, id)
		}
	}
	// Rows that arrived with explicit ids (a restored dump): a plain RESTART
	// moves every replica's sequence past them.
	execSQL(t, a, `INSERT INTO t (id, origin) SELECT g, 0 FROM generate_series(5000, 5100) AS g`)
	execSQL(t, a, `ALTER SEQUENCE t_id_seq RESTART`)
	c.converge(10 * time.Second)
	for r := range c.proxies {
		var id int
		if err := c.connect(r).QueryRow(ctx, `INSERT INTO t (origin) VALUES ($1) RETURNING id`, r+1).Scan(&id); err != nil {
			t.Fatalf("replica %d after RESTART: %v", r+1, err)
		}
		if id <= 5100 || id > 5100+16 || id%16 != r+1 {
			t.Fatalf("replica %d: first id after RESTART over rows up to 5100 is %d", r+1, id)
		}
	}
	c.converge(10 * time.Second)
}

// TLS and SCRAM through a real proxy of a cluster: the proxy verifies the
// password against pg_authid itself (over its admin connection), the
// replica trusts the proxy's socket. No --allow-passwordless-logins: the
// proxy verified the client, PostgreSQL's trust is then harmless.
func TestTLSAndSCRAMThroughTheProxy(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := certs.WriteSelfSigned(cert, key, "tashkent proxy", []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, 1, func(i int, cfg *proxy.Config) {
		cfg.TLSCert, cfg.TLSKey, cfg.Auth = cert, key, proxy.AuthSCRAM
		cfg.AllowPasswordlessLogins = false
	})
	execSQL(t, c.direct(0), `SET password_encryption = 'scram-sha-256'; CREATE ROLE alice LOGIN SUPERUSER PASSWORD 'secret of alice'`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := func(password, params string) string {
		return fmt.Sprintf("postgres://alice:%s@%s/postgres?%s", password, c.proxies[0].Addr(), params)
	}
	for _, params := range []string{"sslmode=require", "sslmode=verify-full&sslrootcert=" + cert} {
		conn, err := pgx.Connect(ctx, url("secret%20of%20alice", params))
		if err != nil {
			t.Fatalf("%s: %v", params, err)
		}
		var who string
		if err := conn.QueryRow(ctx, `SELECT current_user`).Scan(&who); err != nil || who != "alice" {
			t.Fatalf("current_user %q, %v", who, err)
		}
		// A write through the authenticated, encrypted session is replicated
		// as usual.
		if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS seen (k int PRIMARY KEY); INSERT INTO seen VALUES (1) ON CONFLICT DO NOTHING`); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	_, err := pgx.Connect(ctx, url("wrong", "sslmode=require"))
	if sqlState(err) != "28P01" || !strings.Contains(err.Error(), `password authentication failed for user "alice"`) {
		t.Fatalf("wrong password: %v, want 28P01", err)
	}
	psql, lookErr := exec.LookPath("psql")
	if lookErr != nil {
		t.Fatalf("psql is needed: %v", lookErr)
	}
	host, port, _ := strings.Cut(c.proxies[0].Addr().String(), ":")
	cmd := exec.Command(psql, "-X", "-A", "-t", "-h", host, "-p", port, "-U", "alice", "-d", "postgres", "-c", `SELECT 'tls ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`, "-c", `\conninfo`)
	cmd.Env = append(os.Environ(), "PGPASSWORD=secret of alice", "PGSSLMODE=verify-full", "PGSSLROOTCERT="+cert, "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SSL connection") {
		t.Fatalf("psql sslmode=verify-full with SCRAM: %v\n%s", err, out)
	}
}

// LISTEN/NOTIFY, large objects and advisory locks would stay on one
// replica: refused with 0A000 and a hint, in both protocols, and a
// transaction block they were tried in fails as after any error.
func unreplicatedFeaturesAreRefused(t *testing.T, c *testCluster) {
	conn := c.connect(0)
	ctx := context.Background()
	for _, sql := range []string{
		`LISTEN jobs`,
		`NOTIFY jobs, 'x'`,
		`SELECT pg_notify('jobs', 'x')`,
		`SELECT lo_create(0)`,
		`SELECT lo_from_bytea(0, '\x0102')`,
		`SELECT pg_advisory_lock(42)`,
		`SELECT pg_try_advisory_xact_lock(42)`,
		`SELECT setval('t_id_seq', 5000)`,
	} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			_, err := conn.Exec(ctx, sql, mode)
			if sqlState(err) != "0A000" || !strings.Contains(err.Error(), "tashkent") {
				t.Fatalf("%s (%v): %v, want 0A000", sql, mode, err)
			}
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(1)`); sqlState(err) != "0A000" {
		t.Fatalf("in a block: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); sqlState(err) != "25P02" {
		t.Fatalf("after the refusal the block must be failed: %v", err)
	}
	tx.Rollback(ctx)
	// The session is fine afterwards; UNLISTEN (harmless) is accepted.
	execSQL(t, conn, `UNLISTEN *`)
	var n int
	if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("session after refusals: %d %v", n, err)
	}
}

// SELECT ... FOR UPDATE then an update of the locked row, on two replicas
// at once: the row locks are local, but the writes are certified, so
// exactly one transaction commits and the other gets 40001, as two
// sessions of one PostgreSQL at REPEATABLE READ would.
func selectForUpdateThenWriteCommitsOnce(t *testing.T, c *testCluster) {
	execSQL(t, c.connect(0), `CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL)`)
	execSQL(t, c.connect(0), `INSERT INTO acct VALUES (1, 100)`)
	c.converge(10 * time.Second)
	ctx := context.Background()
	txs := make([]pgx.Tx, 2)
	for r := range 2 {
		tx, err := c.connect(r).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var bal int
		if err := tx.QueryRow(ctx, `SELECT balance FROM acct WHERE id = 1 FOR UPDATE`).Scan(&bal); err != nil {
			t.Fatalf("replica %d: %v", r+1, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE acct SET balance = $1 WHERE id = 1`, bal-10); err != nil {
			t.Fatal(err)
		}
		txs[r] = tx
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, tx := range txs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = tx.Commit(ctx) }()
	}
	wg.Wait()
	committed := 0
	for _, err := range errs {
		switch {
		case err == nil:
			committed++
		case sqlState(err) != "40001":
			t.Fatalf("commit: %v, want 40001", err)
		}
	}
	if committed != 1 {
		t.Fatalf("%d of two FOR UPDATE + UPDATE transactions committed", committed)
	}
	c.converge(10 * time.Second)
	var bal int
	if err := c.direct(1).QueryRow(ctx, `SELECT balance FROM acct WHERE id = 1`).Scan(&bal); err != nil || bal != 90 {
		t.Fatalf("balance %d (%v), want 90", bal, err)
	}
}
