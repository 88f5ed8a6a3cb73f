package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// tpcbChunkRows bounds the rows of one loading transaction. pgbench -i
// fills pgbench_accounts in one transaction, which on a tashkent replica
// is one writeset: over the certifier's limits from scale 8 on (writeset
// keys max 1,048,576, bytes max 63 MiB). In chunks of this many rows, one
// writeset stays at a few MB at any scale.
const tpcbChunkRows = 50_000

// fillTPCB generates pgbench's TPC-B rows (what `pgbench -i -I g` writes:
// scale branches, 10 tellers and 100,000 accounts per branch, balances 0,
// blank fillers) with INSERT ... SELECT generate_series, one transaction
// per chunk of at most tpcbChunkRows rows, through conn.
func fillTPCB(ctx context.Context, conn *pgx.Conn, scale int) error {
	tables := []struct {
		sql  string
		rows int
	}{
		{`INSERT INTO pgbench_branches (bid, bbalance) SELECT i, 0 FROM generate_series($1::int, $2::int) i`, scale},
		{`INSERT INTO pgbench_tellers (tid, bid, tbalance) SELECT i, (i - 1) / 10 + 1, 0 FROM generate_series($1::int, $2::int) i`, 10 * scale},
		{`INSERT INTO pgbench_accounts (aid, bid, abalance, filler) SELECT i, (i - 1) / 100000 + 1, 0, ''
		   FROM generate_series($1::int, $2::int) i`, 100_000 * scale},
	}
	for _, t := range tables {
		for first := 1; first <= t.rows; first += tpcbChunkRows {
			last := min(first+tpcbChunkRows-1, t.rows)
			if _, err := conn.Exec(ctx, t.sql, first, last); err != nil {
				return fmt.Errorf("load rows %d..%d: %w", first, last, err)
			}
		}
	}
	return nil
}
