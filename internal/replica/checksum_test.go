package replica

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// checksumSchema holds values whose text depends on the print settings
// Checksum pins (a timestamptz prints in the session's time zone), so a
// Checksum that did not pin them would differ between sessions.
const checksumSchema = `
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE stamps (id int PRIMARY KEY, at timestamptz, d float8, b bytea, i interval);
CREATE SCHEMA other;
CREATE TABLE other.nokey (v text);
INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, NULL);
INSERT INTO stamps VALUES (1, '2026-11-21 12:00:00+00', 0.1, '\xdeadbeef', '1 day 2 hours'),
	(2, '1999-12-31 23:59:59.5+05', -0.0, '', '-3 months');
INSERT INTO other.nokey VALUES ('x'), ('x'), ('y');
`

// checksumBeforeQualifying is Checksum as it was before its SQL was
// qualified, run the same way: on a clean search_path its
// values must be today's, so that checksums stay comparable.
func checksumBeforeQualifying(t *testing.T, conn *pgx.Conn) map[string]string {
	t.Helper()
	ctx := tctx(t)
	tables := queryStrings(t, conn, `
SELECT format('%I.%I', n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relpersistence <> 't'
	AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'tashkent', 'pg_toast')
	AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
ORDER BY 1`)
	out := map[string]string{}
	mustExec(t, conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	mustExec(t, conn, `SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true),
		set_config('IntervalStyle', 'postgres', true), set_config('extra_float_digits', '1', true),
		set_config('bytea_output', 'hex', true)`)
	for _, tbl := range tables {
		var n int64
		var sum string
		if err := conn.QueryRow(ctx, `SELECT count(*), md5(coalesce(string_agg(s.h, '' ORDER BY s.h), ''))
			FROM (SELECT md5((tashkent_t.*)::text) AS h FROM ONLY `+tbl+` AS tashkent_t) AS s`).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		out[tbl] = fmt.Sprintf("%d:%s", n, sum)
	}
	mustExec(t, conn, "COMMIT")
	return out
}

// TestChecksumUnderAHostileSearchPath: Checksum is how tests, the demo and
// `tashkent status` tell that replicas converged. Under a search_path that
// finds decoys of md5, string_agg, count, the catalog's = operators and
// set_config first (and a session time zone that prints timestamptz
// differently), it must give the value it gives under a clean search_path
// on the same rows, which is the value of the query before it was
// qualified: a decoy md5 would make two diverged replicas look equal.
func TestChecksumUnderAHostileSearchPath(t *testing.T) {
	c := newCluster(t, 1)
	// A table without a primary key is refused capture: the set-up is
	// this server's own.
	c.local(0, checksumSchema)
	c.local(0, decoySQL)
	srv := c.nodes[0].srv

	clean := cleanSession(t, srv)
	want := checksumBeforeQualifying(t, clean)
	if len(want) != 3 {
		t.Fatalf("the old checksum query saw %d tables, want 3: %v", len(want), want)
	}
	sameChecksums(t, want, checksum(t, clean))

	hostile := hostileSession(t, srv)
	mustExec(t, hostile, `SET TimeZone = 'Asia/Tashkent'; SET extra_float_digits = 0; SET bytea_output = 'escape'`)
	got := checksum(t, hostile)
	if len(got) != len(want) {
		t.Errorf("Checksum under the decoy search_path covers %d tables, want %d", len(got), len(want))
	}
	sameChecksums(t, want, got)
}

// hostileInstance starts a PostgreSQL, runs schema, makes the database's
// search_path the decoys' (decoySQL) and then runs Install on a session
