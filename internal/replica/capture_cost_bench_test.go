package replica

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// The capture cost benchmarks compare, on one PostgreSQL, four databases
// with the same tables: "today" (Install, with capture_key and
// take_writeset in C), "plpgsql" (Install with both in PL/pgSQL),
// "before" (Install, then the capture and collect functions from before
// the capture cost work, testdata/capture_v0.sql), and "none" (no
// tashkent at all). They measure
// the CPU time of each database's backend (/proc/<pid>/schedstat), in
// rounds that alternate the databases, so that the noise of a shared
// machine hits all three alike. Capture's cost is a database's time minus
// none's.

// costVariants are the databases, in the order each round runs them.
var costVariants = []string{"today", "plpgsql", "before", "none"}

// tpcbSchema is pgbench's TPC-B-like schema at scale 1, with the primary
// key that capture needs on pgbench_history, and the version table of the
// proxy's commit (tashkent.applied in the captured databases).
const tpcbSchema = `
CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88));
CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int, tbalance int, filler char(84));
CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84));
CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22),
	hid uuid PRIMARY KEY DEFAULT gen_random_uuid());
INSERT INTO pgbench_branches SELECT 1, 0, '';
INSERT INTO pgbench_tellers SELECT g, 1, 0, '' FROM generate_series(1, 10) g;
INSERT INTO pgbench_accounts SELECT g, 1, 0, '' FROM generate_series(1, 100000) g;
CREATE TABLE bulk (id int PRIMARY KEY, abalance int, filler char(84));
INSERT INTO bulk SELECT g, 0, '' FROM generate_series(1, 100000) g;`

// costDatabases starts a PostgreSQL (synchronous_commit=off, as mw runs)
// with the three databases and returns a prepared session on each.
func costDatabases(b *testing.B) (*pgserver.Server, map[string]*pgx.Conn) {
	srv := pgtest.Start(b, pgtest.SynchronousCommitOff())
	admin := pgtest.Connect(b, srv, "postgres")
	ctx := tctx(b)
	sessions := map[string]*pgx.Conn{}
	requireCCapture(b)
	for _, db := range costVariants {
		mustExec(b, admin, "CREATE DATABASE "+db)
		c := pgtest.Connect(b, srv, db)
		mustExec(b, c, tpcbSchema)
		mustExec(b, c, `VACUUM ANALYZE`)
		if db == "none" {
			mustExec(b, c, `CREATE SCHEMA tashkent; CREATE TABLE tashkent.applied (version bigint PRIMARY KEY, committed_at timestamptz NOT NULL DEFAULT now())`)
		} else if db == "plpgsql" {
			if err := InstallCapture(ctx, c, CapturePLpgSQL, nil); err != nil {
				b.Fatal(err)
			}
		} else if err := InstallCapture(ctx, c, CaptureC, nil); err != nil {
			b.Fatal(err)
		}
		if db == "before" {
			for _, fn := range []string{"tashkent.capture", "tashkent.capture_key"} {
				mustExec(b, c, strings.ReplaceAll(captureV0SQL, "FUNCNAME", fn))
			}
			mustExec(b, c, collectV0SQL)
		}
		s := pgtest.Connect(b, srv, db)
		if db != "none" {
			if err := PrepareSession(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
		sessions[db] = s
	}
	return srv, sessions
}

// backendCPU returns the CPU time the session's backend has used so far.
func backendCPU(ctx context.Context, b *testing.B, c *pgx.Conn) time.Duration {
	pid := c.PgConn().PID()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		b.Fatalf("backend %d: %v", pid, err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(ns)
}

// tpcbTransaction runs one pgbench TPC-B-like transaction as the proxy
// commits it: SET CONSTRAINTS ALL IMMEDIATE, the collect (none if collect
// is nil: a database without capture) and the version insert before
// COMMIT. collect returns the number of rows or changes it collected,
// which must be the transaction's 4.
func tpcbTransaction(ctx context.Context, b testing.TB, c *pgx.Conn, collect func(pgx.Tx) (int, error), version int64, rnd *rand.Rand) {
	aid, tid, delta := 1+rnd.Intn(100000), 1+rnd.Intn(10), rnd.Intn(10001)-5000
	tx, err := c.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var bal int
	steps := []func() error{
		func() error {
			_, err := tx.Exec(ctx, `UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2`, delta, aid)
			return err
		},
		func() error {
			return tx.QueryRow(ctx, `SELECT abalance FROM pgbench_accounts WHERE aid = $1`, aid).Scan(&bal)
		},
		func() error {
			_, err := tx.Exec(ctx, `UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2`, delta, tid)
			return err
		},
		func() error {
			_, err := tx.Exec(ctx, `UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2`, delta, 1)
			return err
		},
		func() error {
			_, err := tx.Exec(ctx, `INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)`, tid, 1, aid, delta)
			return err
		},
		func() error {
			_, err := tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
			return err
		},
		func() error {
			if collect == nil {
				return nil
			}
			n, err := collect(tx)
			if err == nil && n != 4 {
				err = fmt.Errorf("writeset of %d, want 4", n)
			}
			return err
		},
		func() error {
			// The superuser's insert: the databases of older capture
			// variants have no record_version, and it is the same step for all.
			_, err := tx.Exec(ctx, `INSERT INTO tashkent.applied (version) VALUES ($1)`, version)
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
}

// collectChanges is tpcbTransaction's collect for a superuser's session
// (CollectWriteset): the number of changes.
func collectChanges(ctx context.Context) func(pgx.Tx) (int, error) {
	return func(tx pgx.Tx) (int, error) {
		ws, err := CollectWriteset(ctx, tx)
		return len(ws), err
	}
}

// capturedCollect is tpcbTransaction's collect for database db: none for
// the one without capture, collectChanges for "before" (its functions
// predate take_writeset), and for the others the proxy's collect, with the
// database's record token (take_writeset, in C with the C capture since
// session 13).
func capturedCollect(ctx context.Context, db string, tokens map[string]string) func(pgx.Tx) (int, error) {
	switch db {
	case "none":
		return nil
	case "before":
		return collectChanges(ctx)
	}
	return func(tx pgx.Tx) (int, error) {
		ws, err := CollectWritesetWithToken(ctx, tx, tokens[db])
		return len(ws), err
	}
}

// recordTokens reads every captured database's record token.
func recordTokens(ctx context.Context, b *testing.B, sessions map[string]*pgx.Conn) map[string]string {
	tokens := map[string]string{}
	for db, s := range sessions {
		if db == "none" {
			continue
		}
		token, err := ReadRecordToken(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		tokens[db] = token
	}
	return tokens
}

// BenchmarkCaptureCostTPCB measures capture's CPU per pgbench TPC-B-like
// transaction (one client, prepared statements), today and before the
// capture cost work. b.N transactions per database, in rounds of 100
// alternating the databases. Reported: backend CPU µs per transaction of
// each database, and capture's cost today as a fraction of before's
// ((today - none) / (before - none)). Medians over the rounds.
//
//	go test -run '^$' -bench BenchmarkCaptureCostTPCB -benchtime 3000x ./internal/replica/
func BenchmarkCaptureCostTPCB(b *testing.B) {
	_, sessions := costDatabases(b)
	ctx := tctx(b)
	rnd := rand.New(rand.NewSource(1))
	const perRound = 100
	version := map[string]int64{}
	tokens := recordTokens(ctx, b, sessions)
	// Warm up: plans cached, the plpgsql functions compiled.
	for _, db := range costVariants {
		for i := 0; i < 20; i++ {
			version[db]++
			tpcbTransaction(ctx, b, sessions[db], capturedCollect(ctx, db, tokens), version[db], rnd)
		}
	}
	perTxn := map[string][]float64{}
	b.ResetTimer()
	for done := 0; done < b.N; done += perRound {
		n := min(perRound, b.N-done)
		for _, db := range costVariants {
			s := sessions[db]
			before := backendCPU(ctx, b, s)
			for i := 0; i < n; i++ {
				version[db]++
				tpcbTransaction(ctx, b, s, capturedCollect(ctx, db, tokens), version[db], rnd)
			}
			perTxn[db] = append(perTxn[db], float64(backendCPU(ctx, b, s)-before)/float64(time.Microsecond)/float64(n))
		}
	}
	b.StopTimer()
	reportCaptureCost(b, perTxn, "µs/txn")
}

// BenchmarkCaptureCostBulkUpdate measures an UPDATE of 100,000 rows (no
// key moved) and the collect of its writeset, today and before the capture
// cost work, rolled back each time. b.N statements per database,
// alternating. Reported: backend CPU ms of the UPDATE, of the collect, and
// of both, per database (medians), and today / before and today / plpgsql
// for both.
//
//	go test -run '^$' -bench BenchmarkCaptureCostBulkUpdate -benchtime 5x ./internal/replica/
func BenchmarkCaptureCostBulkUpdate(b *testing.B) {
	benchmarkBulkStatement(b, `UPDATE bulk SET abalance = abalance + 1`)
}

// BenchmarkCaptureCostBulkInsert is BenchmarkCaptureCostBulkUpdate for an
// INSERT of 100,000 rows, which the C capture records itself (in batches
// of 1,024 rows), where it leaves an UPDATE of several rows to PL/pgSQL.
//
//	go test -run '^$' -bench BenchmarkCaptureCostBulkInsert -benchtime 5x ./internal/replica/
func BenchmarkCaptureCostBulkInsert(b *testing.B) {
	benchmarkBulkStatement(b, `INSERT INTO bulk SELECT g, 0, '' FROM generate_series(1000001, 1100000) g`)
}

// benchmarkBulkStatement runs stmt, which writes 100,000 rows, and the
// collect of its writeset, rolled back, b.N times per database.
func benchmarkBulkStatement(b *testing.B, stmt string) {
	_, sessions := costDatabases(b)
	ctx := tctx(b)
	write, collect := map[string][]float64{}, map[string][]float64{}
	total := map[string][]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, db := range costVariants {
			s := sessions[db]
			tx, err := s.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			t0 := backendCPU(ctx, b, s)
			tag, err := tx.Exec(ctx, stmt)
			if err != nil || tag.RowsAffected() != 100000 {
				b.Fatalf("%s: %s: %v, %v", db, stmt, tag, err)
			}
			t1 := backendCPU(ctx, b, s)
			if db != "none" {
				ws, err := CollectWriteset(ctx, tx)
				if err != nil || len(ws) != 100000 {
					b.Fatalf("%s: writeset of %d changes, %v", db, len(ws), err)
				}
			}
			t2 := backendCPU(ctx, b, s)
			if err := tx.Rollback(ctx); err != nil {
				b.Fatal(err)
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			write[db] = append(write[db], ms(t1-t0))
			collect[db] = append(collect[db], ms(t2-t1))
			total[db] = append(total[db], ms(t2-t0))
		}
	}
	b.StopTimer()
	for _, db := range costVariants {
		b.ReportMetric(median(write[db]), db+"-statement-ms")
		if db != "none" {
			b.ReportMetric(median(collect[db]), db+"-collect-ms")
		}
	}
	b.ReportMetric(median(total["today"])/median(total["before"]), "today/before")
	b.ReportMetric(median(total["today"])/median(total["plpgsql"]), "today/plpgsql")
	b.Logf("statement+collect ms per round: today %v plpgsql %v before %v none %v", rounded(total["today"]),
		rounded(total["plpgsql"]), rounded(total["before"]), rounded(total["none"]))
}

// reportCaptureCost reports the medians of per-round costs and capture's
// cost today relative to before.
func reportCaptureCost(b *testing.B, perTxn map[string][]float64, unit string) {
	m := map[string]float64{}
	for _, db := range costVariants {
		m[db] = median(perTxn[db])
		b.ReportMetric(m[db], db+"-"+unit)
	}
	b.ReportMetric(m["today"]-m["none"], "capture-today-"+unit)
	b.ReportMetric(m["before"]-m["none"], "capture-before-"+unit)
	b.ReportMetric(m["plpgsql"]-m["none"], "capture-plpgsql-"+unit)
	b.ReportMetric((m["today"]-m["none"])/(m["before"]-m["none"]), "capture-today/before")
	b.ReportMetric((m["today"]-m["none"])/(m["plpgsql"]-m["none"]), "capture-today/plpgsql")
	b.Logf("per round (%s): today %v plpgsql %v before %v none %v", unit, rounded(perTxn["today"]), rounded(perTxn["plpgsql"]),
		rounded(perTxn["before"]), rounded(perTxn["none"]))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x + 0.5)
	}
	return out
}

// BenchmarkCaptureCostForeignKey measures what certifying foreign-key
// references costs a transaction of 10 single-row INSERTs into a table
// with a foreign key, as the proxy commits it (capture, collect, version
// insert): backend CPU of the same transaction on three tables of one
// database, in alternating rounds of 100: "plain" has no foreign key,
// "fk" has one, "fk-norefs" has one with the reference trigger disabled
// (capture as before references existed). Reported: µs per transaction
// of each (medians over the rounds), and references' cost, fk - fk-norefs.
// A table without foreign keys has exactly the triggers it had before
// (TestCaptureReferences checks it), so it pays nothing.
//
//	go test -run '^$' -bench BenchmarkCaptureCostForeignKey -benchtime 3000x ./internal/replica/
func BenchmarkCaptureCostForeignKey(b *testing.B) {
	srv, c := instance(b, `CREATE TABLE parent (id int PRIMARY KEY);
		CREATE TABLE "plain" (id bigint PRIMARY KEY, k int NOT NULL, c text NOT NULL);
		CREATE TABLE fk (id bigint PRIMARY KEY, k int NOT NULL REFERENCES parent, c text NOT NULL);
		CREATE TABLE "fk-norefs" (id bigint PRIMARY KEY, k int NOT NULL REFERENCES parent, c text NOT NULL)`,
		pgtest.SynchronousCommitOff())
	ctx := tctx(b)
	mustExec(b, c, `SET session_replication_role = replica; INSERT INTO parent SELECT generate_series(0, 9);
		RESET session_replication_role;
		ALTER EVENT TRIGGER tashkent_ddl DISABLE; -- or it would put the trigger back
		ALTER TABLE "fk-norefs" DISABLE TRIGGER tashkent_capture_ref_ins;
		ALTER EVENT TRIGGER tashkent_ddl ENABLE ALWAYS`)
	if got := triggers(b, c, `"fk-norefs"`); len(got) != 6 {
		b.Fatalf("fk-norefs triggers: %v", got)
	}
	var disabled bool
	if err := c.QueryRow(ctx, `SELECT tgenabled = 'D' FROM pg_trigger WHERE tgname = 'tashkent_capture_ref_ins' AND tgrelid = '"fk-norefs"'::regclass`).Scan(&disabled); err != nil || !disabled {
		b.Fatalf("the reference trigger of fk-norefs is not disabled (%v)", err)
	}
	s := session(b, srv)
	tables := []string{"plain", "fk", "fk-norefs"}
	var seq, version int64
	txn := func(table string) {
		tx, err := s.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for j := 0; j < 10; j++ {
			seq++
			if _, err := tx.Exec(ctx, `INSERT INTO "`+table+`" VALUES ($1, $2, $3)`, seq, j, "some text "+strconv.FormatInt(seq, 10)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := CollectWriteset(ctx, tx); err != nil {
			b.Fatal(err)
		}
		version++
		if _, err := tx.Exec(ctx, `INSERT INTO tashkent.applied (version) VALUES ($1)`, version); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, table := range tables { // warm up
		for range 20 {
			txn(table)
		}
	}
	const perRound = 100
	perTxn := map[string][]float64{}
	b.ResetTimer()
	for done := 0; done < b.N; done += perRound {
		n := min(perRound, b.N-done)
		for _, table := range tables {
			before := backendCPU(ctx, b, s)
			for range n {
				txn(table)
			}
			perTxn[table] = append(perTxn[table], float64(backendCPU(ctx, b, s)-before)/float64(time.Microsecond)/float64(n))
		}
	}
	b.StopTimer()
	for _, table := range tables {
		b.ReportMetric(median(perTxn[table]), table+"-µs/txn")
	}
	b.ReportMetric(median(perTxn["fk"])-median(perTxn["fk-norefs"]), "references-µs/txn")
}
