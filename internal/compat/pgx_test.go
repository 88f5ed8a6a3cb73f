package compat

// The pgx (Go) suite: the scenarios of the other clients' suites
// (compat/python/psycopg_suite.py is the reference), written with
// github.com/jackc/pgx/v5, the driver most Go applications use. It runs in
// the test process, directly against PostgreSQL and on the cluster,
// like the psql suite; init registers it in suites.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

func init() {
	suites = append(suites, suite{
		name:      "pgx",
		preflight: func(string) error { return nil }, // a Go module of this repository
		run:       runPgxSuite,
	})
}

// pgxEnv is what a pgx scenario needs: the target and its table prefix.
type pgxEnv struct {
	tg     target
	prefix string
}

func (e pgxEnv) dsn(port int, password string) string {
	return fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable&connect_timeout=10",
		compatUser, password, e.tg.host, port, compatDatabase)
}

func (e pgxEnv) table(name string) string { return e.prefix + "_" + name }

func (e pgxEnv) connect(ctx context.Context, port int) (*pgx.Conn, error) {
	return pgx.Connect(ctx, e.dsn(port, compatPassword))
}

var pgxScenarios = map[string]func(ctx context.Context, e pgxEnv) error{
	"connect":           pgxConnect,
	"simple_query":      pgxSimpleQuery,
	"extended_query":    pgxExtendedQuery,
	"prepared":          pgxPrepared,
	"transactions":      pgxTransactions,
	"copy_in":           pgxCopyIn,
	"copy_out":          pgxCopyOut,
	"large_result":      pgxLargeResult,
	"cursor":            pgxCursor,
	"pipeline":          pgxPipeline,
	"errors":            pgxErrors,
	"cancel":            pgxCancel,
	"statement_timeout": pgxStatementTimeout,
	"retry_40001":       pgxRetry40001,
	"no_pk_write":       pgxNoPKWrite,
}

func runPgxSuite(ctx context.Context, t *testing.T, _ string, tg target, env []string) map[string]result {
	e := pgxEnv{tg: tg, prefix: "compat_pgx_" + tg.name}
	res := map[string]result{}
	for _, sc := range scenarios {
		if !selected("COMPAT_ONLY", sc) {
			continue
		}
		run := pgxScenarios[sc]
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		began := time.Now()
		err := run(sctx, e)
		cancel()
		if err != nil {
			res[sc] = result{status: "FAIL", detail: err.Error()}
		} else {
			res[sc] = result{status: "PASS"}
		}
		t.Logf("pgx %s %s: %s in %s", tg.name, sc, res[sc].status, time.Since(began).Round(time.Millisecond))
	}
	return res
}

// withTable creates a table, runs f, and drops it whatever happened.
func withTable(ctx context.Context, e pgxEnv, name, columns string, f func(conn *pgx.Conn, table string) error) error {
	conn, err := e.connect(ctx, e.tg.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	table := e.table(name)
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s; CREATE TABLE %s (%s)", table, table, columns)); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	defer conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
	return f(conn, table)
}

func wantSQLState(want string, err error, what string) error {
	if got := pgcode.Of(err); got != want {
		return fmt.Errorf("%s: got %v, want SQLSTATE %s", what, err, want)
	}
	return nil
}

func wantEqual[T comparable](got, want T, what string) error {
	if got != want {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

// sameOnBoth checks that the table reads the same through the second port
// (another replica of the cluster), waiting for replication.
func sameOnBoth(ctx context.Context, e pgxEnv, conn *pgx.Conn, table string) error {
	q := fmt.Sprintf("SELECT count(*), coalesce(sum(hashtext(x::text)), 0) FROM %s x", table)
	var n1, h1 int64
	if err := conn.QueryRow(ctx, q).Scan(&n1, &h1); err != nil {
		return err
	}
	c2, err := e.connect(ctx, e.tg.port2)
	if err != nil {
		return err
	}
	defer c2.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n2, h2 int64
		err := c2.QueryRow(ctx, q).Scan(&n2, &h2)
		if err == nil && n1 == n2 && h1 == h2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("table %s differs on the second port after 10s: (%d, %d) vs (%d, %d), %v", table, n1, h1, n2, h2, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pgxConnect(ctx context.Context, e pgxEnv) error {
	conn, err := e.connect(ctx, e.tg.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var user, db string
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_user, current_database(), current_setting('server_version_num')::int").Scan(&user, &db, &version); err != nil {
		return err
	}
	if user != compatUser || db != compatDatabase || version/10000 != 15 {
		return fmt.Errorf("connected as %s to %s, server %d", user, db, version)
	}
	if conn.PgConn().PID() == 0 || conn.PgConn().ParameterStatus("server_version") == "" {
		return errors.New("no BackendKeyData or server_version ParameterStatus")
	}
	_, err = pgx.Connect(ctx, e.dsn(e.tg.port, compatPassword+"-wrong"))
	if err == nil || pgcode.Of(err) != pgcode.InvalidPassword {
		return fmt.Errorf("a wrong password gave %v, want SQLSTATE 28P01", err)
	}
	return nil
}

func pgxSimpleQuery(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "simple", "id int PRIMARY KEY, name text", func(conn *pgx.Conn, t string) error {
		// pgconn.Exec is the simple query protocol: several statements in one Query.
		results, err := conn.PgConn().Exec(ctx, fmt.Sprintf("INSERT INTO %[1]s VALUES (1, 'one'); INSERT INTO %[1]s VALUES (2, 'two'); SELECT name FROM %[1]s ORDER BY id", t)).ReadAll()
		if err != nil {
			return err
		}
		if len(results) != 3 || len(results[2].Rows) != 2 || string(results[2].Rows[1][0]) != "two" {
			return fmt.Errorf("multi-statement results: %+v", results)
		}
		// QueryExecModeSimpleProtocol: parameters interpolated by pgx.
		tag, err := conn.Exec(ctx, "UPDATE "+t+" SET name = $1 WHERE id = $2", pgx.QueryExecModeSimpleProtocol, "deux", 2)
		if err != nil {
			return err
		}
		if err := wantEqual(tag.RowsAffected(), int64(1), "rows updated"); err != nil {
			return err
		}
		return sameOnBoth(ctx, e, conn, t)
	})
}

func pgxExtendedQuery(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "extended", "id int PRIMARY KEY, t text, n numeric, b bool, ts timestamptz, by bytea, nul text, f float8",
		func(conn *pgx.Conn, t string) error {
			ts := time.Date(2024, 2, 29, 12, 34, 56, 789000000, time.UTC)
			ins := "INSERT INTO " + t + " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec} {
				id := int(mode)
				if _, err := conn.Exec(ctx, ins, mode, id, "naïve ☃", "12345.6789", true, ts, []byte{0, 1, 0xfe}, nil, 2.5); err != nil {
					return fmt.Errorf("insert (mode %v): %w", mode, err)
				}
				var s, n string
				var b bool
				var gotTS time.Time
				var by []byte
				var nul *string
				var f float64
				err := conn.QueryRow(ctx, "SELECT t, n::text, b, ts, by, nul, f FROM "+t+" WHERE id = $1", mode, id).Scan(&s, &n, &b, &gotTS, &by, &nul, &f)
				if err != nil {
					return err
				}
				if s != "naïve ☃" || n != "12345.6789" || !b || !gotTS.Equal(ts) || string(by) != "\x00\x01\xfe" || nul != nil || f != 2.5 {
					return fmt.Errorf("row read back (mode %v): %q %q %v %v %x %v %v", mode, s, n, b, gotTS, by, nul, f)
				}
			}
			return sameOnBoth(ctx, e, conn, t)
		})
}

func pgxPrepared(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "prepared", "id int PRIMARY KEY, v text", func(conn *pgx.Conn, t string) error {
		if _, err := conn.Prepare(ctx, "ins", "INSERT INTO "+t+" VALUES ($1, $2)"); err != nil {
			return err
		}
		for i := range 5 { // autocommit writes through a named statement
			if _, err := conn.Exec(ctx, "ins", i, fmt.Sprint("v", i)); err != nil {
				return err
			}
		}
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for i := 5; i < 10; i++ {
				if _, err := tx.Exec(ctx, "ins", i, fmt.Sprint("v", i)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		// The default mode caches prepared statements per SQL text.
		for i := range 10 {
			var v string
			if err := conn.QueryRow(ctx, "SELECT v FROM "+t+" WHERE id = $1", i).Scan(&v); err != nil || v != fmt.Sprint("v", i) {
				return fmt.Errorf("prepared SELECT %d: %q %v", i, v, err)
			}
		}
		if err := conn.Deallocate(ctx, "ins"); err != nil {
			return err
		}
		return sameOnBoth(ctx, e, conn, t)
	})
}

func pgxTransactions(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "tx", "id int PRIMARY KEY, v text", func(conn *pgx.Conn, t string) error {
		ins := "INSERT INTO " + t + " VALUES ($1, 'x')"
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, ins, 1); err != nil {
				return err
			}
			sp, err := tx.Begin(ctx) // SAVEPOINT
			if err != nil {
				return err
			}
			sp.Exec(ctx, ins, 2)
			if _, err := sp.Exec(ctx, ins, 1); pgcode.Of(err) != pgcode.UniqueViolation {
				return fmt.Errorf("duplicate in a savepoint: %v", err)
			}
			if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT
				return err
			}
			_, err = tx.Exec(ctx, ins, 3)
			return err
		})
		if err != nil {
			return err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		tx.Exec(ctx, ins, 4)
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		tx, err = conn.Begin(ctx)
		if err != nil {
			return err
		}
		tx.Exec(ctx, ins, 5)
		if _, err := tx.Exec(ctx, "SELECT 1/0"); pgcode.Of(err) != pgcode.DivisionByZero {
			return fmt.Errorf("division by zero: %v", err)
		}
		if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
			return fmt.Errorf("COMMIT of a failed block: %v, want pgx.ErrTxCommitRollback", err)
		}
		var ids string
		if err := conn.QueryRow(ctx, "SELECT string_agg(id::text, ',' ORDER BY id) FROM "+t).Scan(&ids); err != nil {
			return err
		}
		if err := wantEqual(ids, "1,3", "rows after commit, savepoint rollback, rollback and a failed block"); err != nil {
			return err
		}
		return sameOnBoth(ctx, e, conn, t)
	})
}

func pgxCopyIn(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "copyin", "id int PRIMARY KEY, name text", func(conn *pgx.Conn, t string) error {
		rows := make([][]any, 1000)
		for i := range rows {
			rows[i] = []any{i + 1, fmt.Sprintf("row %d\twith tab", i+1)}
		}
		n, err := conn.CopyFrom(ctx, pgx.Identifier{t}, []string{"id", "name"}, pgx.CopyFromRows(rows))
		if err != nil {
			return err
		}
		if err := wantEqual(n, int64(1000), "rows copied in"); err != nil {
			return err
		}
		// Text COPY through pgconn, then a duplicate that fails the whole COPY.
		if _, err := conn.PgConn().CopyFrom(ctx, strings.NewReader("2001\tplain\n"), "COPY "+t+" FROM STDIN"); err != nil {
			return err
		}
		_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("5000\tnew\n1\tdup\n"), "COPY "+t+" FROM STDIN")
		if err := wantSQLState(pgcode.UniqueViolation, err, "COPY with a duplicate key"); err != nil {
			return err
		}
		var count int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&count); err != nil {
			return err
		}
		if err := wantEqual(count, 1001, "rows after a failed COPY"); err != nil {
			return err
		}
		return sameOnBoth(ctx, e, conn, t)
	})
}

func pgxCopyOut(ctx context.Context, e pgxEnv) error {
	conn, err := e.connect(ctx, e.tg.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var out strings.Builder
	tag, err := conn.PgConn().CopyTo(ctx, &out, "COPY (SELECT g, g * 2 FROM generate_series(1, 3) g) TO STDOUT WITH (FORMAT csv, HEADER)")
	if err != nil {
		return err
	}
	if err := wantEqual(out.String(), "g,?column?\n1,2\n2,4\n3,6\n", "CSV out"); err != nil {
		return err
	}
	return wantEqual(tag.RowsAffected(), int64(3), "COPY TO rows")
}

func pgxLargeResult(ctx context.Context, e pgxEnv) error {
	conn, err := e.connect(ctx, e.tg.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT g, md5(g::text) FROM generate_series(1, $1) g", 100000)
	if err != nil {
		return err
	}
	var n, sum int64
	var last string
	for rows.Next() {
		var g int64
		if err := rows.Scan(&g, &last); err != nil {
			return err
		}
		n, sum = n+1, sum+g
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n != 100000 || sum != 100000*100001/2 {
		return fmt.Errorf("%d rows, sum %d", n, sum)
	}
	var want string
	conn.QueryRow(ctx, "SELECT md5('100000')").Scan(&want)
	return wantEqual(last, want, "md5 of the last row")
}

func pgxCursor(ctx context.Context, e pgxEnv) error {
	conn, err := e.connect(ctx, e.tg.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DECLARE compat_big CURSOR FOR SELECT g FROM generate_series(1, 100000) g"); err != nil {
			return err
		}
		var n, sum int64
		for {
			rows, err := tx.Query(ctx, "FETCH 5000 FROM compat_big")
			if err != nil {
				return err
			}
			got := 0
			for rows.Next() {
				var g int64
				rows.Scan(&g)
				n, sum, got = n+1, sum+g, got+1
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if got == 0 {
				break
			}
		}
		if n != 100000 || sum != 100000*100001/2 {
			return fmt.Errorf("cursor gave %d rows, sum %d", n, sum)
		}
		return nil
	})
}

// pgxPipeline sends a batch: pgx queues every statement and one Sync.
func pgxPipeline(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "pipeline", "id int PRIMARY KEY, v text", func(conn *pgx.Conn, t string) error {
		b := &pgx.Batch{}
		b.Queue("INSERT INTO "+t+" VALUES ($1, $2)", 1, "a")
		b.Queue("INSERT INTO "+t+" VALUES ($1, $2)", 2, "b")
		b.Queue("SELECT count(*) FROM " + t)
		br := conn.SendBatch(ctx, b)
		for i := range 2 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("batch insert %d: %w", i, err)
			}
		}
		var count int
		if err := br.QueryRow().Scan(&count); err != nil {
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		if err := wantEqual(count, 2, "rows seen inside the batch"); err != nil {
			return err
		}
		// An error mid-batch: the batch is one implicit transaction, nothing stays.
		b = &pgx.Batch{}
		b.Queue("INSERT INTO "+t+" VALUES ($1, $2)", 3, "c")
		b.Queue("INSERT INTO "+t+" VALUES ($1, $2)", 1, "dup")
		if err := conn.SendBatch(ctx, b).Close(); pgcode.Of(err) != pgcode.UniqueViolation {
			return fmt.Errorf("batch with a duplicate: %v", err)
		}
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&count); err != nil {
			return err
		}
		if err := wantEqual(count, 2, "rows after the failed batch"); err != nil {
			return err
		}
		return sameOnBoth(ctx, e, conn, t)
	})
}

func pgxErrors(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "errors", "id int PRIMARY KEY", func(conn *pgx.Conn, t string) error {
		ins := "INSERT INTO " + t + " VALUES ($1)"
		if _, err := conn.Exec(ctx, ins, 1); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, ins, 1)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgcode.UniqueViolation || pgErr.ConstraintName != t+"_pkey" {
			return fmt.Errorf("duplicate key: %v (constraint %q)", err, pgErr.ConstraintName)
		}
		for _, c := range []struct{ sql, code string }{
			{"SELECT 1/0", pgcode.DivisionByZero}, {"SELECT * FROM compat_no_such_table", pgcode.UndefinedTable}, {"SELEC 1", pgcode.SyntaxError},
		} {
			_, err := conn.Exec(ctx, c.sql)
			if err := wantSQLState(c.code, err, c.sql); err != nil {
				return err
			}
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, ins, 1)
		if err := wantSQLState(pgcode.UniqueViolation, err, "duplicate in a block"); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT 1")
		if err := wantSQLState(pgcode.InFailedSQLTransaction, err, "statement in a failed block"); err != nil {
			return err
		}
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		var v int
		return conn.QueryRow(ctx, "SELECT 42").Scan(&v)
	})
}

// pgxCancel cancels a running statement through the context (pgx sends a
// CancelRequest on a new connection).
func pgxCancel(ctx context.Context, e pgxEnv) error {
	conn, err := e.connect(ctx, e.tg.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	start := time.Now()
	go func() {
		time.Sleep(500 * time.Millisecond)
		conn.PgConn().CancelRequest(context.Background())
	}()
	_, err = conn.Exec(ctx, "SELECT pg_sleep(10)")
	if err := wantSQLState(pgcode.QueryCanceled, err, "cancelled pg_sleep"); err != nil {
		return err
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		return fmt.Errorf("the cancel took %s", elapsed)
	}
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func pgxStatementTimeout(ctx context.Context, e pgxEnv) error {
	conn, err := e.connect(ctx, e.tg.port)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SET statement_timeout = 200"); err != nil {
		return err
	}
	start := time.Now()
	_, err = conn.Exec(ctx, "SELECT pg_sleep(5)")
	if err := wantSQLState(pgcode.QueryCanceled, err, "pg_sleep past statement_timeout"); err != nil {
		return err
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		return fmt.Errorf("the timeout took %s", elapsed)
	}
	if _, err := conn.Exec(ctx, "RESET statement_timeout"); err != nil {
		return err
	}
	var v string
	if err := conn.QueryRow(ctx, "SHOW statement_timeout").Scan(&v); err != nil {
		return err
	}
	return wantEqual(v, "0", "statement_timeout after RESET")
}

// pgxRetry40001 runs two workers, one per port (two replicas through the
// cluster), incrementing one counter with a retry loop on 40001.
func pgxRetry40001(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "counter", "id int PRIMARY KEY, n int NOT NULL", func(a *pgx.Conn, t string) error {
		if _, err := a.Exec(ctx, "INSERT INTO "+t+" VALUES (1, 0)"); err != nil {
			return err
		}
		b, err := e.connect(ctx, e.tg.port2)
		if err != nil {
			return err
		}
		defer b.Close(context.Background())
		sel, upd := "SELECT n FROM "+t+" WHERE id = 1", "UPDATE "+t+" SET n = $1 WHERE id = 1"
		if err := pollUntil(ctx, func() bool { var n int; return b.QueryRow(ctx, sel).Scan(&n) == nil }); err != nil {
			return fmt.Errorf("the counter row on the second connection: %w", err)
		}
		const perWorker = 3
		var mu sync.Mutex
		conflicts := 0
		var barrier sync.WaitGroup
		barrier.Add(2)
		worker := func(conn *pgx.Conn, seed int64) error {
			rng := rand.New(rand.NewSource(seed))
			first := true
			for done, attempts := 0, 0; done < perWorker; attempts++ {
				if attempts > 200 {
					return errors.New("no success after 200 attempts")
				}
				err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
					var n int
					if err := tx.QueryRow(ctx, sel).Scan(&n); err != nil {
						return err
					}
					if first {
						first = false
						barrier.Done()
						barrier.Wait() // both read the same value
					} else {
						time.Sleep(time.Duration(rng.Intn(30)) * time.Millisecond)
					}
					_, err := tx.Exec(ctx, upd, n+1)
					return err
				})
				switch {
				case err == nil:
					done++
				case pgcode.Of(err) == pgcode.SerializationFailure:
					mu.Lock()
					conflicts++
					mu.Unlock()
					time.Sleep(time.Duration(10+rng.Intn(40)) * time.Millisecond)
				default:
					return err
				}
			}
			return nil
		}
		errs := make(chan error, 2)
		go func() { errs <- worker(a, 1) }()
		go func() { errs <- worker(b, 2) }()
		for range 2 {
			if err := <-errs; err != nil {
				return fmt.Errorf("worker: %w", err)
			}
		}
		if conflicts == 0 {
			return errors.New("no 40001: the concurrent updates did not conflict")
		}
		for _, conn := range []*pgx.Conn{a, b} {
			if err := pollUntil(ctx, func() bool { var n int; return conn.QueryRow(ctx, sel).Scan(&n) == nil && n == 2*perWorker }); err != nil {
				return fmt.Errorf("counter == %d on both connections: %w", 2*perWorker, err)
			}
		}
		return nil
	})
}

func pollUntil(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out after 10s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// pgxNoPKWrite: a table without a primary key takes inserts (equal rows
// too), updates and deletes, on the cluster as on PostgreSQL.
func pgxNoPKWrite(ctx context.Context, e pgxEnv) error {
	return withTable(ctx, e, "nopk", "a int, b text", func(conn *pgx.Conn, t string) error {
		for _, s := range []struct {
			sql  string
			args []any
		}{
			{"INSERT INTO " + t + " VALUES ($1, 'x'), ($1, 'x')", []any{1}},
			{"UPDATE " + t + " SET b = 'y' WHERE ctid = (SELECT min(ctid) FROM " + t + ")", nil},
			{"DELETE FROM " + t + " WHERE b = $1", []any{"x"}},
		} {
			if _, err := conn.Exec(ctx, s.sql, s.args...); err != nil {
				return err
			}
		}
		var got string
		if err := conn.QueryRow(ctx, "SELECT count(*)::text || min(b) FROM "+t).Scan(&got); err != nil {
			return err
		}
		if got != "1y" {
			return fmt.Errorf("rows left: %s, want 1y", got)
		}
		return nil
	})
}
