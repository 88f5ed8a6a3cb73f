package capture_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
)

// tpcbTables creates pgbench's tables under a prefix (history with the
// primary key tashkent's benchmarks give it), scale 1.
var tpcbTables = []string{
	`CREATE TABLE %[1]s_branches (bid int PRIMARY KEY, bbalance int, filler char(88))`,
	`CREATE TABLE %[1]s_tellers (tid int PRIMARY KEY, bid int, tbalance int, filler char(84))`,
	`CREATE TABLE %[1]s_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84))`,
	`CREATE TABLE %[1]s_history (hid uuid PRIMARY KEY DEFAULT gen_random_uuid(), tid int, bid int, aid int, delta int,
		mtime timestamp, filler char(22))`,
	`INSERT INTO %[1]s_branches VALUES (1, 0, '')`,
	`INSERT INTO %[1]s_tellers SELECT g, 1, 0, '' FROM generate_series(1, 10) AS g`,
	`INSERT INTO %[1]s_accounts SELECT g, 1, 0, '' FROM generate_series(1, 100000) AS g`,
	// n TPC-B transactions' writes in the calling transaction; the
	// backend time per transaction, in µs.
	`CREATE FUNCTION %[1]s_tpcb(n int) RETURNS float8 LANGUAGE plpgsql AS $$
	DECLARE
		t0 timestamptz := clock_timestamp();
		v_aid int;
		v_tid int;
		v_delta int;
	BEGIN
		FOR i IN 1..n LOOP
			v_aid := 1 + (i * 7919) %% 100000;
			v_tid := 1 + i %% 10;
			v_delta := i %% 5000 - 2500;
			UPDATE %[1]s_accounts SET abalance = abalance + v_delta WHERE aid = v_aid;
			UPDATE %[1]s_tellers SET tbalance = tbalance + v_delta WHERE tid = v_tid;
			UPDATE %[1]s_branches SET bbalance = bbalance + v_delta WHERE bid = 1;
			INSERT INTO %[1]s_history (tid, bid, aid, delta, mtime) VALUES (v_tid, 1, v_aid, v_delta, now());
		END LOOP;
		RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / n;
	END $$`,
}

// BenchmarkCaptureTPCB measures what capture costs a TPC-B transaction
// (3 UPDATEs and an INSERT, each of one row), two ways, on pgbench's
// tables with and without the capture triggers, alternated:
//
//   - statements-µs: the four statements' backend time, run from a
//     plpgsql loop inside one transaction (rolled back), so only the
//     triggers differ;
//   - commit-µs: whole transactions from a client, each committed: with
//     capture that adds collapse, encoding and the round trip to the
//     agent's stand-in.
//
// Reported: medians over rounds of the difference per transaction, and
// of the time without capture.
//
//	TASHKENT_PG_INCLUDEDIR=$(bash scripts/pg-server-headers.sh) \
//	  go test -run '^$' -bench BenchmarkCaptureTPCB -benchtime 20x ./internal/capture/
func BenchmarkCaptureTPCB(b *testing.B) {
	ctx := context.Background()
	a := agenttest.Start(b)
	conn := a.Connect("postgres")
	for _, prefix := range []string{"cap", "raw"} {
		for _, sql := range tpcbTables {
			if _, err := conn.Exec(ctx, fmt.Sprintf(sql, prefix)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, table := range []string{"branches", "tellers", "accounts", "history"} {
		if _, err := conn.Exec(ctx, `SET tashkent.maintenance = on; DROP TRIGGER tashkent_capture ON raw_`+table+
			`; DROP TRIGGER tashkent_capture_truncate ON raw_`+table+`; RESET tashkent.maintenance`); err != nil {
			b.Fatal(err)
		}
	}
	const loop = 500
	const clientTxns = 200
	statements := func(prefix string) float64 {
		var us float64
		if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
			b.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT `+prefix+`_tpcb($1)`, loop).Scan(&us); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
			b.Fatal(err)
		}
		return us
	}
	commits := func(prefix string) float64 {
		batch := func(i int) *pgx.Batch {
			aid, tid, delta := 1+(i*7919)%100000, 1+i%10, i%5000-2500
			bt := &pgx.Batch{}
			bt.Queue(`BEGIN`)
			bt.Queue(`UPDATE `+prefix+`_accounts SET abalance = abalance + $1 WHERE aid = $2`, delta, aid)
			bt.Queue(`UPDATE `+prefix+`_tellers SET tbalance = tbalance + $1 WHERE tid = $2`, delta, tid)
			bt.Queue(`UPDATE `+prefix+`_branches SET bbalance = bbalance + $1 WHERE bid = 1`, delta)
			bt.Queue(`INSERT INTO `+prefix+`_history (tid, bid, aid, delta, mtime) VALUES ($1, 1, $2, $3, now())`, tid, aid, delta)
			bt.Queue(`COMMIT`)
			return bt
		}
		t0 := time.Now()
		for i := range clientTxns {
			if err := conn.SendBatch(ctx, batch(i)).Close(); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(t0).Microseconds()) / clientTxns
	}
	statements("cap")
	statements("raw")
	commits("cap")
	commits("raw")
	var stmt, stmtRaw, commit, commitRaw []float64
	b.ResetTimer()
	for range b.N {
		c, r := statements("cap"), statements("raw")
		stmt, stmtRaw = append(stmt, c-r), append(stmtRaw, r)
		c, r = commits("cap"), commits("raw")
		commit, commitRaw = append(commit, c-r), append(commitRaw, r)
	}
	b.ReportMetric(median(stmt), "statements-µs/txn")
	b.ReportMetric(median(stmtRaw), "statements-uncaptured-µs/txn")
	b.ReportMetric(median(commit), "commit-µs/txn")
	b.ReportMetric(median(commitRaw), "commit-uncaptured-µs/txn")
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
