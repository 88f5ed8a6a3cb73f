package proxy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A prepared COMMIT or END run through the unnamed portal (Bind, Describe,
// Execute, Sync: libpq's PQexecPrepared, how pgbench -M prepared ends every
// transaction) is answered by the proxy itself up to the commit
// (commitUnit): the client must get what PostgreSQL sends (BindComplete,
// NoData, CommandComplete COMMIT, ReadyForQuery idle), and the transaction
// must be certified like any other: committed and replicated, committed
// with nothing to do after a BEGIN alone, or refused with 40001 and over.
func TestPreparedCommitThroughTheUnnamedPortal(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE t (k int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, setup, `INSERT INTO t VALUES (1, 0)`)
	c.converge(10 * time.Second)
	a, b := c.connect(0).PgConn(), c.connect(1).PgConn()
	for _, pg := range []*pgconn.PgConn{a, b} {
		for name, sql := range map[string]string{"end_txn": "END", "commit_txn": "COMMIT"} {
			if _, err := pg.Prepare(ctx, name, sql, nil); err != nil {
				t.Fatalf("PREPARE %s: %v", sql, err)
			}
		}
	}
	simple := func(pg *pgconn.PgConn, sql string) {
		t.Helper()
		if _, err := pg.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	direct := c.direct(0).PgConn()
	if _, err := direct.Prepare(ctx, "end_txn", "END", nil); err != nil {
		t.Fatal(err)
	}
	simple(direct, "BEGIN")
	want, _ := portalCommit(t, direct, "end_txn") // what PostgreSQL itself answers
	commit := func(pg *pgconn.PgConn, name string) *pgproto3.ErrorResponse {
		t.Helper()
		got, failed := portalCommit(t, pg, name)
		if failed == nil && got != want {
			t.Fatalf("%s answered %s; PostgreSQL answers %s", name, got, want)
		}
		return failed
	}

	simple(a, `BEGIN; UPDATE t SET n = 1 WHERE k = 1`)
	if failed := commit(a, "end_txn"); failed != nil {
		t.Fatalf("END of a write: %v", failed.Message)
	}
	simple(a, `BEGIN`)
	if failed := commit(a, "commit_txn"); failed != nil {
		t.Fatalf("COMMIT of an empty block: %v", failed.Message)
	}

	c.converge(10 * time.Second) // b's snapshot has n = 1
	simple(a, `BEGIN; UPDATE t SET n = 2 WHERE k = 1`)
	simple(b, `BEGIN; UPDATE t SET n = 3 WHERE k = 1`)
	if failed := commit(a, "commit_txn"); failed != nil {
		t.Fatalf("the first of two conflicting COMMITs: %v", failed.Message)
	}
	if failed := commit(b, "end_txn"); failed == nil || failed.Code != "40001" {
		t.Fatalf("the second of two conflicting COMMITs returned %+v, want 40001", failed)
	}
	c.converge(10 * time.Second)
	var n int
	if err := c.direct(1).QueryRow(ctx, `SELECT n FROM t WHERE k = 1`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("replica 2 holds n = %d (err %v), want the first COMMIT's 2", n, err)
	}
}

// portalCommit runs prepared statement name through the unnamed portal as
// libpq does (Bind, Describe, Execute, Sync) and returns the answer's
// message types with the final transaction status ("2 n C Z:I"), and the
// error, if there was one.
func portalCommit(t *testing.T, pg *pgconn.PgConn, name string) (string, *pgproto3.ErrorResponse) {
	t.Helper()
	fe := pg.Frontend()
	fe.Send(&pgproto3.Bind{PreparedStatement: name})
	fe.Send(&pgproto3.Describe{ObjectType: 'P'})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var types []string
	var failed *pgproto3.ErrorResponse
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.BindComplete:
			types = append(types, "2")
		case *pgproto3.NoData:
			types = append(types, "n")
		case *pgproto3.CommandComplete:
			types = append(types, "C:"+string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			e := *m
			failed = &e
			types = append(types, "E")
		case *pgproto3.ReadyForQuery:
			return strings.Join(append(types, "Z:"+string(m.TxStatus)), " "), failed
		default:
			types = append(types, fmt.Sprintf("%T", msg))
		}
	}
}

// A BEGIN or COMMIT whose Parse declared a parameter type, or an unnamed
// COMMIT after a simple query, is not a unit the proxy answers itself:
// PostgreSQL refuses the Bind (08P01: the statement needs an argument;
// 26000: every simple query drops the unnamed statement), and so must the
// proxy, failing the block the COMMIT would have committed (reviews h39
// and h40: the proxy committed it).
func TestPreparedBeginAndCommitThatPostgreSQLRefusesAreRefused(t *testing.T) {
	c := startCluster(t, 1, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	execSQL(t, c.connect(0), `CREATE TABLE t (k int PRIMARY KEY, n int NOT NULL)`)
	execSQL(t, c.connect(0), `INSERT INTO t VALUES (1, 0)`)
	through, direct := c.connect(0).PgConn(), c.direct(0).PgConn()
	// Straight to PostgreSQL, writes bypass capture (which refuses them there).
	if _, err := direct.Exec(ctx, `SET session_replication_role = replica`).ReadAll(); err != nil {
		t.Fatal(err)
	}
	simple := func(pg *pgconn.PgConn, sql string) {
		t.Helper()
		if _, err := pg.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	answers := func(pg *pgconn.PgConn) []string {
		t.Helper()
		for name, sql := range map[string]string{"typed_begin": "BEGIN", "typed_commit": "COMMIT"} {
			if _, err := pg.Prepare(ctx, name, sql, []uint32{23}); err != nil {
				t.Fatalf("PREPARE %s with a parameter type: %v", sql, err)
			}
		}
		typedBegin, _ := portalCommit(t, pg, "typed_begin")
		simple(pg, `BEGIN; UPDATE t SET n = n + 1 WHERE k = 1`)
		typedCommit, _ := portalCommit(t, pg, "typed_commit")
		simple(pg, `ROLLBACK`)
		if _, err := pg.Prepare(ctx, "", "COMMIT", nil); err != nil {
			t.Fatal(err)
		}
		simple(pg, `BEGIN; UPDATE t SET n = n + 1 WHERE k = 1`)
		unnamedCommit, _ := portalCommit(t, pg, "")
		simple(pg, `ROLLBACK`)
		return []string{typedBegin, typedCommit, unnamedCommit}
	}
	want := answers(direct)
	got := answers(through)
	if !slices.Equal(got, want) {
		t.Fatalf("the proxy answered %q; PostgreSQL answers %q (a BEGIN and a COMMIT with a declared parameter type, an unnamed COMMIT after a simple query)", got, want)
	}
	var n int
	if err := c.direct(0).QueryRow(ctx, `SELECT n FROM t WHERE k = 1`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("n = %d (err %v): a refused COMMIT's writes were committed", n, err)
	}
}
