package guarantees_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// What a session sets for itself (time zone, date and interval styles,
// float digits, bytea output, client encoding, search_path) changes how it
// reads and writes values, never what replicates: the same values written
// from a session with every such setting changed and from one with the
// defaults give identical rows on every replica, and the writes of a
// session that sent its own TimeZone and DateStyle in its startup packet
// (as JDBC does) are served and replicated like any other.
func TestSessionSettingsDoNotChangeWhatReplicates(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	ctx := context.Background()
	execSQL(t, c.Connect(0), `CREATE SCHEMA other`)
	execSQL(t, c.Connect(0), `CREATE TABLE public.vals (id int PRIMARY KEY, ts timestamptz, d date, iv interval, f float8, by bytea, tx text, n numeric, j jsonb)`)
	execSQL(t, c.Connect(0), `CREATE TABLE other.vals (id int PRIMARY KEY)`)
	c.converge()

	odd := c.connectAs(0, "postgres", func(cfg *pgx.ConnConfig) {
		cfg.RuntimeParams["TimeZone"] = "America/St_Johns"
		cfg.RuntimeParams["DateStyle"] = "SQL, DMY"
	})
	for _, sql := range []string{
		`SET IntervalStyle = 'sql_standard'`,
		`SET extra_float_digits = -3`,
		`SET bytea_output = 'escape'`,
		`SET search_path = other, public`,
		`SET client_encoding = 'LATIN1'`,
		`SET lc_monetary = 'C'`,
	} {
		execSQL(t, odd, sql)
	}
	plain := c.Connect(1)
	// LATIN1 text: sent as raw bytes (pgx's own simple protocol wants UTF8).
	insert := `INSERT INTO public.vals VALUES (1, '2024-02-29 12:34:56.789+00', '2024-02-29', '1 day 02:03:04.5',
		0.1 + 0.2, '\x00ff10', 'caf` + "\xe9" + `', 12345.678900, '{"b": 1, "a": [1.50, "x"]}')`
	if err := simple(odd, insert); err != nil {
		t.Fatalf("insert from the session with its own settings: %v", err)
	}
	execSQL(t, odd, `INSERT INTO vals (id) VALUES (1)`) // other.vals, by the search_path
	plainInsert := `INSERT INTO public.vals VALUES ($1, '2024-02-29 12:34:56.789+00', '2024-02-29', '1 day 02:03:04.5',
		0.1 + 0.2, '\x00ff10', 'café', 12345.678900, '{"b": 1, "a": [1.50, "x"]}')`
	if _, err := plain.Exec(ctx, plainInsert, pgx.QueryExecModeSimpleProtocol, 2); err != nil {
		t.Fatal(err)
	}
	c.converge() // the odd session's replica has the plain one's row
	// An update from the odd session of the row the plain one wrote, and
	// back: keys print alike whatever the session's settings.
	execSQL(t, odd, `UPDATE public.vals SET iv = iv * 2 WHERE id = 2`)
	execSQL(t, odd, `UPDATE public.vals SET iv = iv / 2 WHERE id = 2`)
	c.converge()
	const same = `SELECT count(*) FROM public.vals a JOIN public.vals b ON a.id = 1 AND b.id = 2
		WHERE (a.ts, a.d, a.iv, a.f, a.by, a.tx, a.n, a.j) IS NOT DISTINCT FROM (b.ts, b.d, b.iv, b.f, b.by, b.tx, b.n, b.j)`
	for i := range 2 {
		if n := c.countOn(i, same); n != 1 {
			t.Errorf("replica %d: the rows written with and without the session's settings differ:\n%s", i+1,
				c.textOn(i, `SELECT string_agg(v::text, E'\n' ORDER BY id) FROM public.vals v`))
		}
		if n := c.countOn(i, `SELECT count(*) FROM other.vals`); n != 1 {
			t.Errorf("replica %d: other.vals holds %d rows, want the one the search_path chose", i+1, n)
		}
	}
}
