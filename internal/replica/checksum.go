package replica

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Checksum returns, for every user table (schemas other than pg_catalog,
// information_schema, tashkent and temporary ones), "rows:md5" where md5
// is computed over the sorted md5s of the rows' text forms: independent of
// physical row order and of primary keys, so it also covers tables without
// one. All tables are read in one REPEATABLE READ snapshot, with the
// settings that affect how values print pinned, so two replicas holding
// the same data give the same map. conn must be idle. It reads every row:
// meant for convergence tests and operator checks, not a hot path.
func Checksum(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	if st := conn.PgConn().TxStatus(); st != 'I' {
		return nil, fmt.Errorf("replica: checksum: connection is in a transaction (status %q)", st)
	}
	rows, err := conn.Query(ctx, userTablesSQL)
	if err != nil {
		return nil, fmt.Errorf("replica: checksum: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("replica: checksum: %w", err)
	}
	out := make(map[string]string, len(tables))
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	b.Queue(`SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true),
		set_config('IntervalStyle', 'postgres', true), set_config('extra_float_digits', '1', true),
		set_config('bytea_output', 'hex', true)`)
	for _, t := range tables {
		// t comes from the catalog, quoted by format('%I.%I').
		b.Queue(`SELECT count(*), md5(coalesce(string_agg(s.h, '' ORDER BY s.h), ''))
			FROM (SELECT md5((tashkent_t.*)::text) AS h FROM ONLY ` + t + ` AS tashkent_t) AS s`).QueryRow(func(row pgx.Row) error {
			var n int64
			var sum string
			if err := row.Scan(&n, &sum); err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
			out[t] = fmt.Sprintf("%d:%s", n, sum)
			return nil
		})
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		_ = rollback(ctx, conn)
		return nil, fmt.Errorf("replica: checksum: %w", err)
	}
	return out, nil
}
