package replica

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// BenchmarkSealCost measures what sealing the writeset buffer costs a
// pgbench TPC-B-like transaction (see BenchmarkCaptureCostTPCB), as the
// proxy runs it: in one PostgreSQL, database "sealed" as Install leaves
// it (capture functions with tashkent_capture's rights; the collect
// through take_writeset, prepared, with the record token) and database
// "open" with the capture functions switched to the caller's rights and
// the collect's query prepared on its own, as before the seal. One
// superuser session each, rounds of 100 transactions alternating the
// databases. Reported: backend CPU µs per transaction of each (medians of
// the rounds) and the median per-round difference.
//
//	go test -run '^$' -bench BenchmarkSealCost -benchtime 3000x ./internal/replica/
func BenchmarkSealCost(b *testing.B) {
	srv := pgtest.Start(b, pgtest.SynchronousCommitOff())
	admin := pgtest.Connect(b, srv, "postgres")
	ctx := tctx(b)
	variants := []string{"sealed", "open"}
	sessions := map[string]*pgx.Conn{}
	tokens := map[string]string{}
	for _, db := range variants {
		mustExec(b, admin, "CREATE DATABASE "+db)
		c := pgtest.Connect(b, srv, db)
		mustExec(b, c, tpcbSchema)
		mustExec(b, c, `VACUUM ANALYZE`)
		if err := Install(ctx, c); err != nil {
			b.Fatal(err)
		}
		if db == "open" {
			mustExec(b, c, `ALTER FUNCTION tashkent.capture() SECURITY INVOKER;
				ALTER FUNCTION tashkent.capture_key() SECURITY INVOKER`)
		}
		token, err := ReadRecordToken(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		tokens[db] = token
		s := pgtest.Connect(b, srv, db)
		if err := PrepareSession(ctx, s); err != nil {
			b.Fatal(err)
		}
		sessions[db] = s
	}
	collect := map[string]func(ctx context.Context, tx pgx.Tx, token string) (int, error){
		"sealed": func(ctx context.Context, tx pgx.Tx, token string) (int, error) {
			return collectCount(ctx, tx, CollectQuery, TrimSQL, token, token)
		},
		"open": func(ctx context.Context, tx pgx.Tx, token string) (int, error) {
			return collectCount(ctx, tx, bufferCollectQuery, TrimSQL, token)
		},
	}
	rnd := rand.New(rand.NewSource(1))
	version := map[string]int64{}
	run := func(db string) {
		version[db]++
		sealCostTransaction(ctx, b, sessions[db], version[db], rnd, func(tx pgx.Tx) (int, error) {
			return collect[db](ctx, tx, tokens[db])
		})
	}
	for _, db := range variants {
		for i := 0; i < 20; i++ {
			run(db)
		}
	}
	const perRound = 100
	perTxn := map[string][]float64{}
	var diff []float64
	b.ResetTimer()
	for done := 0; done < b.N; done += perRound {
		n := min(perRound, b.N-done)
		for _, db := range variants {
			before := backendCPU(ctx, b, sessions[db])
			for i := 0; i < n; i++ {
				run(db)
			}
			perTxn[db] = append(perTxn[db], float64(backendCPU(ctx, b, sessions[db])-before)/float64(time.Microsecond)/float64(n))
		}
		diff = append(diff, perTxn["sealed"][len(perTxn["sealed"])-1]-perTxn["open"][len(perTxn["open"])-1])
	}
	b.StopTimer()
	for _, db := range variants {
		b.ReportMetric(median(perTxn[db]), db+"-µs/txn")
	}
	b.ReportMetric(median(diff), "sealed-minus-open-µs/txn")
}

// collectCount runs a collect query (with args) and the trim, as the
// proxy does, and returns the number of buffer rows.
func collectCount(ctx context.Context, tx pgx.Tx, query, trim, token string, args ...any) (int, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, trim, token)
	return n, err
}

// sealCostTransaction is tpcbTransaction with the collect given.
func sealCostTransaction(ctx context.Context, b *testing.B, c *pgx.Conn, version int64, rnd *rand.Rand, collect func(pgx.Tx) (int, error)) {
	aid, tid, delta := 1+rnd.Intn(100000), 1+rnd.Intn(10), rnd.Intn(10001)-5000
	tx, err := c.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var bal int
	for _, step := range []func() error{
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
			n, err := collect(tx)
			if err == nil && n != 4 {
				err = fmt.Errorf("writeset of %d rows, want 4", n)
			}
			return err
		},
		func() error {
			_, err := tx.Exec(ctx, recordVersionDirectSQL, version)
			return err
		},
	} {
		if err := step(); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
}
