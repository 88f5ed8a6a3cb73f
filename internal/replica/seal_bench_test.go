package replica

import (
	"context"
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
		tpcbTransaction(ctx, b, sessions[db], func(tx pgx.Tx) (int, error) {
			return collect[db](ctx, tx, tokens[db])
		}, version[db], rnd)
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
