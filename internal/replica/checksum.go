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
//
// Its SQL names every function, aggregate, operator and catalog table with
// its schema: it runs under the search_path the database and role give the
// session, and a schema listed there before pg_catalog could hold an
// md5(text) or string_agg(text, text) that makes every table sum alike,
// so that two diverged replicas would look equal
// (TestChecksumUnderAHostileSearchPath). Qualified names resolve to the
// builtins the bare ones did, so the values are those of the unqualified
// query before (checked by the same test).
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
	b.Queue(pinPrintSettingsSQL)
	for _, t := range tables {
		// t comes from the catalog, quoted by format('%I.%I').
		b.Queue(tableChecksumSQL(t)).QueryRow(func(row pgx.Row) error {
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

// pinPrintSettingsSQL pins, for the checksum's transaction, the settings
// that change how values print as text.
const pinPrintSettingsSQL = `SELECT pg_catalog.set_config('TimeZone', 'UTC', true),
	pg_catalog.set_config('DateStyle', 'ISO, YMD', true),
	pg_catalog.set_config('IntervalStyle', 'postgres', true),
	pg_catalog.set_config('extra_float_digits', '1', true),
	pg_catalog.set_config('bytea_output', 'hex', true)`

// tableChecksumSQL is the query of one table's "rows:md5": the md5 of the
// concatenation of its rows' md5s in order (text's default ordering, which
// ORDER BY takes from the type, not from the search_path). table must be
// quoted already.
func tableChecksumSQL(table string) string {
	return `SELECT pg_catalog.count(*), pg_catalog.md5(coalesce(pg_catalog.string_agg(s.h, '' ORDER BY s.h), ''))
	FROM (SELECT pg_catalog.md5((tashkent_t.*)::pg_catalog.text) AS h FROM ONLY ` + table + ` AS tashkent_t) AS s`
}

// userTablesSQL lists the tables Checksum covers, every name qualified
// (see Checksum). NOT IN and NOT LIKE are written as the operators they
// stand for, so that pg_catalog's are the ones used.
const userTablesSQL = `
SELECT pg_catalog.format('%I.%I', n.nspname, c.relname)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.relkind OPERATOR(pg_catalog.=) 'r' AND c.relpersistence OPERATOR(pg_catalog.<>) 't'
	AND n.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema,tashkent,pg_toast}'::pg_catalog.name[])
	AND n.nspname OPERATOR(pg_catalog.!~~) 'pg\_temp\_%' AND n.nspname OPERATOR(pg_catalog.!~~) 'pg\_toast\_temp\_%'
ORDER BY 1`
