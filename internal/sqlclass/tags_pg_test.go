package sqlclass

// Checks Statement.Tag against the command tags a real PostgreSQL 15 returns. The
// server is started by a tiny private helper: initdb into a temporary directory
// owned by the postgres user (initdb refuses root), postgres on a free port,
// stopped by its PID.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const pgBinDir = "/usr/lib/postgresql/15/bin"

func asPostgres(cmd *exec.Cmd) (uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return os.Getuid(), os.Getgid(), nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, err
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return uid, gid, nil
}

// startPostgres runs a throw-away PostgreSQL 15 until the test ends and
// returns a connection string for it.
func startPostgres(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBinDir, "postgres")); err != nil {
		t.Fatalf("PostgreSQL 15 is needed in %s: %v", pgBinDir, err)
	}
	base, err := os.MkdirTemp("", "sqlclass-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "data")
	initdb := exec.Command(filepath.Join(pgBinDir, "initdb"), "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	uid, gid, err := asPostgres(initdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(base, uid, gid); err != nil {
		t.Fatal(err)
	}
	initdb.Dir = base
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(filepath.Join(pgBinDir, "postgres"), "-D", dir, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	asPostgres(cmd)
	cmd.Dir = base
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	for deadline := time.Now().Add(60 * time.Second); ; {
		c, err := pgconn.Connect(context.Background(), url)
		if err == nil {
			c.Close(context.Background())
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var tagCount = regexp.MustCompile(`( \d+)+$`)

// TestTagsMatchPostgres runs statements of every kind on a real server and
// compares the command tag it returns (without row counts) with Statement.Tag.
func TestTagsMatchPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	url := startPostgres(t)
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	script := []string{
		"CREATE TABLE t (id int PRIMARY KEY, v text)",
		"CREATE TEMP TABLE tt (id int)",
		"CREATE UNLOGGED TABLE u (id int)",
		"INSERT INTO t VALUES (1, 'a'), (2, 'b')",
		"INSERT INTO t VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET v = excluded.v",
		"UPDATE t SET v = 'c' WHERE id = 2",
		"DELETE FROM t WHERE id = 3",
		"MERGE INTO t USING (VALUES (4, 'd')) s(id, v) ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)",
		"SELECT * FROM t",
		"VALUES (1), (2)",
		"TABLE t",
		"WITH x AS (DELETE FROM t WHERE id = 4 RETURNING *) SELECT count(*) FROM x",
		"SELECT * FROM t FOR UPDATE",
		"SELECT * INTO t2 FROM t",
		"SELECT * INTO TEMP t3 FROM t",
		"CREATE TABLE t4 AS SELECT * FROM t",
		"CREATE TABLE t5 AS SELECT * FROM t WITH NO DATA",
		"CREATE MATERIALIZED VIEW mv AS SELECT 1 AS one",
		"REFRESH MATERIALIZED VIEW mv",
		"CREATE VIEW v AS SELECT * FROM t",
		"CREATE TEMP VIEW tv AS SELECT 1",
		"ALTER VIEW v RENAME TO v2",
		"CREATE INDEX i ON t (v)",
		"ALTER INDEX i SET (fillfactor = 50)",
		"ALTER TABLE t ADD COLUMN w int",
		"ALTER TABLE t RENAME COLUMN w TO w2",
		"ALTER TABLE t OWNER TO postgres",
		"CREATE SEQUENCE s",
		"ALTER SEQUENCE s RESTART WITH 10",
		"CREATE TEMP SEQUENCE ts",
		"COMMENT ON TABLE t IS 'x'",
		"CREATE ROLE bob",
		"GRANT SELECT ON t TO bob",
		"REVOKE ALL ON t FROM bob",
		"CREATE ROLE admins",
		"GRANT admins TO bob",
		"CREATE USER carol",
		"CREATE SCHEMA sch",
		"CREATE TYPE mood AS ENUM ('sad', 'ok')",
		"CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
		"CREATE TRIGGER tr AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()",
		"CREATE PROCEDURE p() LANGUAGE sql AS $$ SELECT 1 $$",
		"ALTER FUNCTION f() SET SCHEMA sch",
		"CALL p()",
		"DO $$ BEGIN PERFORM 1; END $$",
		"CREATE EXTENSION IF NOT EXISTS plpgsql",
		"SET search_path TO public",
		"SET LOCAL statement_timeout = 0",
		"RESET search_path",
		"RESET ALL",
		"SET default_transaction_isolation = 'repeatable read'",
		"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
		"SHOW transaction_isolation",
		"EXPLAIN SELECT 1",
		"EXPLAIN ANALYZE INSERT INTO u VALUES (1)",
		"LISTEN ch",
		"NOTIFY ch, 'x'",
		"UNLISTEN ch",
		"UNLISTEN *",
		"PREPARE q(int) AS SELECT $1",
		"DEALLOCATE q",
		"PREPARE q2 AS SELECT 1",
		"DEALLOCATE ALL",
		"DISCARD PLANS",
		"DISCARD SEQUENCES",
		"DISCARD TEMP",
		"DISCARD ALL",
		"BEGIN",
		"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
		"SET CONSTRAINTS ALL DEFERRED",
		"SAVEPOINT a",
		"LOCK TABLE t IN SHARE MODE",
		"DECLARE c CURSOR FOR SELECT * FROM t",
		"FETCH 1 FROM c",
		"MOVE NEXT IN c",
		"CLOSE c",
		"DECLARE c2 CURSOR FOR SELECT 1",
		"CLOSE ALL",
		"RELEASE SAVEPOINT a",
		"SAVEPOINT b",
		"ROLLBACK TO SAVEPOINT b",
		"COMMIT",
		"START TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		"COMMIT AND CHAIN",
		"ROLLBACK",
		"BEGIN READ ONLY",
		"END",
		"BEGIN",
		"ABORT",
		"TRUNCATE u",
		"VACUUM u",
		"ANALYZE u",
		"CLUSTER t USING t_pkey",
		"REINDEX TABLE t",
		"CHECKPOINT",
		"DROP TRIGGER tr ON t",
		"DROP INDEX i",
		"DROP VIEW v2",
		"DROP MATERIALIZED VIEW mv",
		"CREATE TEMPORARY TABLE tt (id int) ON COMMIT DROP",
		"CREATE TEMP TABLE tt (id int)",
		"DROP TABLE pg_temp.tt",
		"DROP TABLE t2, t4, t5",
		"DROP SEQUENCE s",
		"DROP PROCEDURE p()",
		"DROP TYPE mood",
		"DROP SCHEMA sch CASCADE",
		"DROP ROLE carol",
		"CREATE DATABASE d2",
		"DROP DATABASE d2",
	}
	for _, q := range script {
		st, err := Classify(q)
		if err != nil || len(st) != 1 {
			t.Fatalf("Classify(%q) = %v, %v", q, st, err)
		}
		res, err := conn.Exec(ctx, q).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		got := tagCount.ReplaceAllString(res[0].CommandTag.String(), "")
		if got != st[0].Tag {
			t.Errorf("%s: PostgreSQL says %q, Classify says %q (%v)", q, got, st[0].Tag, st[0].Kind)
		}
	}
}
