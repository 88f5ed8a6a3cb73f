package capture_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Inserts, updates and deletes become one change per key, the last one;
// a TRUNCATE drops the table's earlier changes and stays in place.
func TestRowChanges(t *testing.T) {
	f := start(t,
		`CREATE TABLE t (id int PRIMARY KEY, v text)`,
		`CREATE TABLE s (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)`,
		`CREATE SCHEMA "Odd Schema"`,
		`CREATE TABLE "Odd Schema"."T""x" ("Id" int PRIMARY KEY)`)

	f.expect(`INSERT INTO t VALUES (1, 'a b'), (2, NULL), (3, '')`,
		`UPSERT public.t [1] (1,"a b")`, `UPSERT public.t [2] (2,)`, `UPSERT public.t [3] (3,"")`)
	f.expect(`UPDATE t SET v = 'x' WHERE id = 1`, `UPSERT public.t [1] (1,x) keeps`)
	f.expect(`UPDATE t SET id = 5 WHERE id = 2`, `DELETE public.t [2]`, `UPSERT public.t [5] (5,)`)
	f.expect(`DELETE FROM t WHERE id = 5`, `DELETE public.t [5]`)

	// Collapsed to the last change per key, in the order keys first appeared.
	f.expect(`INSERT INTO t VALUES (10, 'a'); UPDATE t SET v = 'b' WHERE id = 10; UPDATE t SET v = 'c' WHERE id = 10`,
		`UPSERT public.t [10] (10,c)`)
	f.expect(`UPDATE t SET v = 'd' WHERE id = 10; UPDATE t SET v = 'e' WHERE id = 10`,
		`UPSERT public.t [10] (10,e) keeps`)
	f.expect(`INSERT INTO t VALUES (11, 'a'); DELETE FROM t WHERE id = 11`, `DELETE public.t [11]`)
	f.expect(`DELETE FROM t WHERE id = 10; INSERT INTO t VALUES (10, 'z')`, `UPSERT public.t [10] (10,z)`)
	f.expect(`UPDATE t SET v = 'q' WHERE id = 3; INSERT INTO t VALUES (12, 'n'); UPDATE t SET v = 'r' WHERE id = 3`,
		`UPSERT public.t [3] (3,r) keeps`, `UPSERT public.t [12] (12,n)`)

	// TRUNCATE: a barrier, in place.
	f.expect(`INSERT INTO t VALUES (20, 'a'); UPDATE s SET v = 'x'; TRUNCATE t; INSERT INTO t VALUES (21, 'b')`,
		`TRUNCATE public.t`, `UPSERT public.t [21] (21,b)`)

	// Keys swapped by one statement: every row's delete comes before the
	// upserts of the same command, so both keys end up upserted.
	f.expect(`INSERT INTO s VALUES (1, 'a'), (2, 'b')`, `UPSERT public.s [1] (1,a)`, `UPSERT public.s [2] (2,b)`)
	f.expect(`UPDATE s SET id = 3 - id`, `UPSERT public.s [1] (1,b)`, `UPSERT public.s [2] (2,a)`)

	// INSERT ... ON CONFLICT and MERGE fire the same row triggers.
	f.expect(`INSERT INTO t VALUES (21, 'u') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`, `UPSERT public.t [21] (21,u) keeps`)
	f.expect(`INSERT INTO t VALUES (30, 'u') ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`, `UPSERT public.t [30] (30,u)`)
	if ws := f.writesets(f.conn, `INSERT INTO t VALUES (21, 'n') ON CONFLICT DO NOTHING`); len(ws) != 0 {
		t.Errorf("an INSERT that did nothing certified %q", ws)
	}
	f.expect(`MERGE INTO t USING (VALUES (30, 'm')) AS s (id, v) ON t.id = s.id
		WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)`, `UPSERT public.t [30] (30,m) keeps`)
	f.expect(`MERGE INTO t USING (VALUES (31, 'm')) AS s (id, v) ON t.id = s.id
		WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)`, `UPSERT public.t [31] (31,m)`)
	f.expect(`MERGE INTO t USING (VALUES (31, 'm')) AS s (id, v) ON t.id = s.id
		WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)`, `DELETE public.t [31]`)

	// Names quoted as format('%I.%I') quotes them.
	f.expect(`INSERT INTO "Odd Schema"."T""x" VALUES (1)`, `UPSERT "Odd Schema"."T""x" [1] (1)`)
}

// Partitions carry the triggers, not the partitioned table: a row is
// captured under the partition that holds it, however it is written.
func TestPartitionedTable(t *testing.T) {
	f := start(t,
		`CREATE TABLE m (id int, k int, v text, PRIMARY KEY (id, k)) PARTITION BY LIST (k)`,
		`CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1)`,
		`CREATE TABLE m2 PARTITION OF m FOR VALUES IN (2, 3) PARTITION BY LIST (k)`,
		`CREATE TABLE m2a PARTITION OF m2 FOR VALUES IN (2)`,
		`CREATE TABLE m3 (v text, id int NOT NULL, k int NOT NULL)`,
		`ALTER TABLE m3 DROP COLUMN v, ADD COLUMN v text`,
		`ALTER TABLE m2 ATTACH PARTITION m3 FOR VALUES IN (3)`)

	got := f.query(f.conn, `SELECT c.relname || ':' || count(t.tgname) FROM pg_class c
		LEFT JOIN pg_trigger t ON t.tgrelid = c.oid AND t.tgname LIKE 'tashkent%'
		WHERE c.relname IN ('m', 'm1', 'm2', 'm2a', 'm3') GROUP BY c.relname ORDER BY 1`)
	if want := []string{"m1:2", "m2:0", "m2a:2", "m3:2", "m:0"}; !slices.Equal(got, want) {
		t.Errorf("triggers per table: %v, want %v", got, want)
	}

	f.expect(`INSERT INTO m VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 3, 'c')`,
		`UPSERT public.m1 [1,1] (1,1,a)`, `UPSERT public.m2a [2,2] (2,2,b)`, `UPSERT public.m3 [3,3] (3,3,c)`)
	f.expect(`UPDATE m1 SET v = 'd'`, `UPSERT public.m1 [1,1] (1,1,d) keeps`)
	// A row that moves to another partition: deleted from one, inserted
	// into the other.
	f.expect(`UPDATE m SET k = 3 WHERE id = 1`, `DELETE public.m1 [1,1]`, `UPSERT public.m3 [1,3] (1,3,d)`)
	f.expect(`TRUNCATE m`, `TRUNCATE public.m1`, `TRUNCATE public.m2a`, `TRUNCATE public.m3`)
}

// Keys are JSON arrays written as to_json writes values (numbers bare,
// NaN and Infinity quoted, bool, json as it is, anything else the type's
// output text as a string), rows record_out's text, both printed under
// pinned settings: the bytes do not depend on the session's.
func TestKeyAndRowEncoding(t *testing.T) {
	f := start(t,
		`CREATE TYPE mood AS ENUM ('sad', 'happy')`,
		`CREATE DOMAIN posint AS int CHECK (VALUE > 0)`,
		`CREATE TABLE kt (i2 smallint, i4 int, i8 bigint, n numeric, f4 real, f8 float8, b bool, tx text,
			u uuid, d date, ts timestamp, tz timestamptz, iv interval, by bytea, j jsonb, arr int[], e mood, dom posint,
			x float8, y timestamptz,
			PRIMARY KEY (i2, i4, i8, n, f4, f8, b, tx, u, d, ts, tz, iv, by, j, arr, e, dom))`)
	const row = `INSERT INTO kt VALUES (1, 2, 9007199254740993, 'NaN', 1.5, 'Infinity', true, E'q"b\\s\nx é',
		'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', '2024-02-29 13:14:15.5', '2024-02-29 13:14:15+02',
		'1 day 02:03:04', '\x00ff', '{"a": [1, "x"]}', '{1,2}', 'happy', 7, 1.0/3, '2024-07-01 00:00:00+00')`
	wantKey := `[1,2,9007199254740993,"NaN",1.5,"Infinity",true,"q\"b\\s\nx é","a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",` +
		`"2024-02-29","2024-02-29 13:14:15.5","2024-02-29 11:14:15+00","1 day 02:03:04","\\x00ff",{"a": [1, "x"]},"{1,2}","happy",7]`

	odd := f.agent.Connect("postgres")
	f.exec(odd, `SET TimeZone = 'America/New_York'; SET DateStyle = 'SQL, DMY'; SET IntervalStyle = 'sql_standard';
		SET bytea_output = 'escape'; SET extra_float_digits = -3`)
	first := f.writesetOn(odd, row)
	f.exec(f.conn, `TRUNCATE kt`)
	second := f.writeset(row)
	if !slices.Equal(first, second) {
		t.Errorf("the same row printed differently under other settings:\n%q\n%q", first, second)
	}
	if len(second) != 1 || !strings.HasPrefix(second[0], "UPSERT public.kt "+wantKey+" (") {
		t.Fatalf("writeset %q, want one upsert with key %s", second, wantKey)
	}
	// The row is the row type's text form under the pinned settings.
	var text string
	err := f.conn.QueryRow(context.Background(), `SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true),
		set_config('IntervalStyle', 'postgres', true), set_config('bytea_output', 'hex', true),
		set_config('extra_float_digits', '1', true), kt::text FROM kt`).Scan(nil, nil, nil, nil, nil, &text)
	if err != nil {
		t.Fatal(err)
	}
	if want := "UPSERT public.kt " + wantKey + " " + text; second[0] != want {
		t.Errorf("row:\n got  %s\n want %s", second[0], want)
	}
	// The session's settings are back after capture.
	var zone, style string
	if err := odd.QueryRow(context.Background(), `SELECT current_setting('TimeZone'), to_char(now(), 'YYYY') || current_setting('DateStyle')`).Scan(&zone, &style); err != nil {
		t.Fatal(err)
	}
	if zone != "America/New_York" || !strings.HasSuffix(style, "SQL, DMY") {
		t.Errorf("session settings after capture: %s, %s", zone, style)
	}
	var printed string
	if err := odd.QueryRow(context.Background(), `SELECT tz::text FROM kt`, pgx.QueryExecModeSimpleProtocol).Scan(&printed); err != nil {
		t.Fatal(err)
	}
	if printed != "29/02/2024 06:14:15 EST" {
		t.Errorf("the session prints %q after capture, want its own style", printed)
	}
}

// COPY FROM fires the row trigger for every row.
func TestCopyFrom(t *testing.T) {
	f := start(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	before := len(f.agent.Requests())
	n, err := f.conn.CopyFrom(context.Background(), pgx.Identifier{"t"}, []string{"id", "v"},
		pgx.CopyFromRows([][]any{{1, "a"}, {2, nil}, {3, "c,d"}}))
	if err != nil || n != 3 {
		t.Fatalf("copy: %d rows, %v", n, err)
	}
	reqs := f.agent.Requests()[before:]
	if len(reqs) != 1 {
		t.Fatalf("%d certifications, want 1", len(reqs))
	}
	want := []string{`UPSERT public.t [1] (1,a)`, `UPSERT public.t [2] (2,)`, `UPSERT public.t [3] (3,"c,d")`}
	if got := render(reqs[0].Writeset); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
