package replica

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// typedSchema is a table with columns of many types, whose text forms
// nest quotes, backslashes, commas and parentheses (arrays, composites,
// ranges, json), a generated column, an identity column that only takes a
// value with OVERRIDING SYSTEM VALUE, and a dropped column among them; a
// table without a primary key of the same kind.
const typedSchema = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy "quoted", (really)');
CREATE TYPE inner_t AS (s text, a int[]);
CREATE TYPE outer_t AS (i inner_t, t text, n numeric);
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TABLE typed (
	id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, gone int,
	t text, vc varchar(40), ch char(5), b bytea, bo bool, i2 smallint, i8 bigint, num numeric(12,3),
	f4 real, f8 double precision, d date, ts timestamp, tstz timestamptz, iv interval, tm time, tmtz timetz,
	j json, jb jsonb, u uuid, ip inet, cid cidr, mac macaddr, pt point, bx box,
	ia int[], ta text[], ia2 int[], comp outer_t, comps outer_t[], m mood, dom posint,
	r int4range, tr tstzrange, bits bit(3), vb varbit, tsv tsvector, mo money, x xml,
	gen text GENERATED ALWAYS AS (coalesce(t, '<null>') || '!') STORED);
ALTER TABLE typed DROP COLUMN gone;
CREATE TABLE bag (s text, gen text GENERATED ALWAYS AS (s || '?') STORED, ta text[], comp outer_t, n int);`

// trickyStrings are the strings the rows' text columns cycle through.
const trickyStrings = `ARRAY[NULL, '', ' ', 'plain', 'a b', 'x"y', '""', 'back\slash', '\N', '\.', 'comma,here', '(paren)', ')(',
	E'tab\there', E'new\nline', E'cr\rhere', E'\r\n', '{1,2}', '{"a,b",NULL}', '("x",)', 'naïve ☃', 'NULL',
	E'all "of" \\ ,() \t\n them', '\\\\']`

// typedRows inserts the rows with g in [from, to] into typed (with the ids
// g when ids is set) and bag.
func typedRows(from, to int, ids bool) string {
	id, overriding, g := "", "", ""
	if ids {
		id, overriding, g = "id, ", " OVERRIDING SYSTEM VALUE", "g, "
	}
	return fmt.Sprintf(`
INSERT INTO typed (%[3]st, vc, ch, b, bo, i2, i8, num, f4, f8, d, ts, tstz, iv, tm, tmtz, j, jb, u, ip, cid, mac, pt, bx,
	ia, ta, ia2, comp, comps, m, dom, r, tr, bits, vb, tsv, mo, x)%[4]s
SELECT %[6]ss, left(s, 40), left(s, 5), CASE WHEN g %% 7 <> 0 THEN convert_to(coalesce(s, ''), 'UTF8') END,
	CASE g %% 3 WHEN 0 THEN true WHEN 1 THEN false END, (g %% 30000)::smallint, g::bigint * 1000000007, g / 7.0,
	('{NaN,Infinity,-Infinity,-0,1.5e-10,3.4028235e38}'::real[])[1 + g %% 6], g * 1.1 / 3,
	CASE WHEN g %% 11 = 0 THEN 'infinity'::date ELSE date '2000-01-01' + g END,
	timestamp '2020-02-29 12:34:56.789' + g * interval '1 hour 1 second',
	timestamptz '2020-02-29 12:34:56.789+05:30' + g * interval '1 hour 1 second',
	make_interval(0, g %% 13, 0, g %% 31, 0, 0, g * 0.001) * CASE WHEN g %% 2 = 0 THEN -1 ELSE 1 END,
	time '00:00' + g * interval '1 second', '12:00:00+05:30'::timetz,
	json_build_object('s', s, 'g', g, 'a', json_build_array(s, NULL)), jsonb_build_object('s', s, 'k', ARRAY[s]),
	md5(g::text)::uuid, CASE WHEN g %% 2 = 0 THEN ('10.0.' || g %% 256 || '.1/24')::inet ELSE '::1'::inet END,
	'192.168.0.0/16', '08:00:2b:01:02:03', point(g, -g / 3.0), box(point(0, 0), point(g, g)),
	ARRAY[g, NULL, -g], ARRAY[s, 'x y', NULL, ''], ARRAY[[g, 1], [2, 3]],
	ROW(ROW(s, ARRAY[g, NULL])::inner_t, s, g / 3.0)::outer_t,
	ARRAY[ROW(ROW(s, NULL)::inner_t, '(,)', NULL)::outer_t, NULL, ROW(NULL, NULL, NULL)::outer_t],
	(enum_range(NULL::mood))[1 + g %% 3], g,
	CASE WHEN g %% 5 = 0 THEN 'empty'::int4range ELSE int4range(g, g + 10, '[]') END,
	tstzrange(timestamptz '2001-02-03 04:05:06+00' + g * interval '1 minute', NULL),
	(g %% 8)::bit(3), B'1011', to_tsvector('simple', coalesce(s, '')) , (g / 100.0)::numeric::money,
	xmlelement(name e, xmlattributes(g AS g), s)
FROM generate_series(%[1]d, %[2]d) AS g, LATERAL (SELECT (%[5]s)[1 + g %% 24] AS s) AS x;
INSERT INTO bag (s, ta, comp, n)
SELECT s, ARRAY[s, NULL], ROW(ROW(s, ARRAY[g]), s, g)::outer_t, g %% 3
FROM generate_series(%[1]d, %[2]d) AS g, LATERAL (SELECT (%[5]s)[1 + g %% 24] AS s) AS x`, from, to, id, overriding, trickyStrings, g)
}

// copyTrio is a cluster of three servers: the first commits, the second
// applies with COPY wherever the applier may (every insert of a row or
// more), the third with the statements alone.
func copyTrio(t *testing.T, schema string) (c *cluster, byCopy, byStatements *node) {
	t.Helper()
	c = newCluster(t, 3)
	c.nodes[1].applier.copyRowsMin = 1
	c.nodes[2].applier.copyRowsMin = 0
	c.commit(0, schema)
	c.catchUp(1)
	c.catchUp(2)
	return c, c.nodes[1], c.nodes[2]
}

// applySpan applies fragments, one span, on nd, one call per fragment.
func (nd *node) applySpan(t *testing.T, fragments []*certifierpb.LogEntry) {
	t.Helper()
	for _, f := range fragments {
		if err := nd.applier.ApplySpan(tctx(t), nd.apply, []*certifierpb.LogEntry{f}); err != nil {
			t.Fatalf("version %d: %v", f.GetVersion(), err)
		}
	}
}

// sameRows checks that every node holds the same rows of table, compared
// as their text (row::text), ordered by order.
func sameRows(t *testing.T, c *cluster, table, order string) {
	t.Helper()
	want := queryStrings(t, c.nodes[0].connect(t), "SELECT x::text FROM "+table+" AS x ORDER BY "+order)
	for i, nd := range c.nodes[1:] {
		got := queryStrings(t, nd.connect(t), "SELECT x::text FROM "+table+" AS x ORDER BY "+order)
		if len(got) != len(want) {
			t.Errorf("server %d has %d rows of %s, the origin %d", i+2, len(got), table, len(want))
		}
		for j := range min(len(got), len(want)) {
			if got[j] != want[j] {
				t.Errorf("server %d, %s row %d:\n got %s\nwant %s", i+2, table, j+1, got[j], want[j])
				break
			}
		}
	}
}

// Rows inserted by COPY are the rows the statements insert, row for row
// as text, whatever their columns' types and values: in a span (inserts,
// updates of rows it inserted, deletes and inserts again of the same
// keys, a table without a primary key) and in an ordinary transaction.
func TestCopiedRowsAreTheStatementsRows(t *testing.T) {
	c, byCopy, byStatements := copyTrio(t, typedSchema)
	span := asSpan(c.commitEach(
		typedRows(1, 300, false),
		`UPDATE typed SET t = t || '+', comp.t = 'changed' WHERE id % 3 = 0; DELETE FROM bag WHERE n = 0`,
		`DELETE FROM typed WHERE id <= 60`,
		typedRows(1, 60, true)+`; UPDATE typed SET vc = 'again' WHERE id % 4 = 0`,
	))
	byCopy.applySpan(t, span)
	byStatements.applySpan(t, span)
	c.commit(0, `DELETE FROM typed WHERE id % 10 = 0; `+typedRows(1001, 1300, true))
	c.catchUp(1)
	c.catchUp(2)

	sameRows(t, c, "typed", "id")
	sameRows(t, c, "bag", "1")
	sameChecksums(t, checksum(t, c.nodes[0].connect(t)), checksum(t, byCopy.connect(t)))
	if rows, fallbacks := byCopy.applier.Copies.Read(); rows < 1200 || fallbacks != 0 {
		t.Errorf("the COPY applier copied %d rows and fell back %d times; want the inserts (>= 1200) copied, no fallback", rows, fallbacks)
	}
	if rows, _ := byStatements.applier.Copies.Read(); rows != 0 {
		t.Errorf("the statements' applier copied %d rows", rows)
	}
}

// Where a row the origin inserted exists here already (as after a replica
// replays what it had applied), the upsert updates it; COPY, refused
// with a unique violation, gives the rows back to the statements, which
// do: in an ordinary transaction, in a span's first fragment and in a
// later one (under the fragment's savepoint). The metadata is loaded
// again before each, so that the table's refused COPY (refuseCopyInto)
// is forgotten and each tries COPY.
func TestCopyGivesRowsThatExistToTheUpsert(t *testing.T) {
	c, byCopy, byStatements := copyTrio(t, `CREATE TABLE kv (k int PRIMARY KEY, v text, w int[])`)
	for i := 1; i <= 2; i++ {
		c.local(i, `INSERT INTO kv SELECT g, 'stale', ARRAY[g] FROM generate_series(1, 60) AS g WHERE g % 20 < 3`)
	}
	ins := func(from, to int) string {
		return fmt.Sprintf(`INSERT INTO kv SELECT g, 'v "' || g || '"', ARRAY[g, NULL] FROM generate_series(%d, %d) AS g`, from, to)
	}
	c.commit(0, ins(1, 20))
	c.catchUp(1)
	c.catchUp(2)
	span := asSpan(c.commitEach(ins(21, 40), ins(41, 60), ins(61, 80)))
	for _, f := range span {
		byCopy.applier.Invalidate()
		byCopy.applySpan(t, []*certifierpb.LogEntry{f})
	}
	byStatements.applySpan(t, span)

	sameRows(t, c, "kv", "k")
	rows, fallbacks := byCopy.applier.Copies.Read()
	if fallbacks != 3 || rows != 20 {
		t.Errorf("the COPY applier fell back %d times and copied %d rows; want 3 (each batch that met a row) and 20 (the last fragment's)", fallbacks, rows)
	}
	if got := queryStrings(t, byCopy.connect(t), `SELECT count(*)::text FROM kv WHERE v = 'stale'`); got[0] != "0" {
		t.Errorf("%s stale rows left", got[0])
	}

	// A row text COPY's converter does not read fails as record_in fails
	// it, in the statements.
	bad := &certifierpb.LogEntry{Version: c.version(1) + 1, Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{
		{Table: "public.kv", Op: certifierpb.Op_OP_UPSERT, Key: []byte("[1000]"), Row: []byte(`(1000,x,{1},extra)`)}}}}
	byCopy.applier.Invalidate()
	err := byCopy.applier.Apply(tctx(t), byCopy.apply, []*certifierpb.LogEntry{bad})
	if pe := pgErr(t, err); pe.Code != pgcode.InvalidTextRepresentation || !strings.Contains(pe.Message, "malformed record literal") || strings.Contains(err.Error(), "copy") {
		t.Errorf("a row of too many columns: %v, want record_in's error from the upsert", err)
	}
	if _, after := byCopy.applier.Copies.Read(); after != fallbacks+1 {
		t.Errorf("%d fallbacks after the bad row, want %d", after, fallbacks+1)
	}
}

// Rules and statement triggers that act in the applier (enabled ALWAYS or
// REPLICA) fire as the statements fire them: such a table is never
// loaded by COPY, which ignores rules and fires no UPDATE statement
// trigger where an upsert does. (An INSERT rule on a table with a primary
// key fails the upsert: ON CONFLICT refuses such tables.)
func TestCopyLeavesTablesWithRulesAndStatementTriggersToTheStatements(t *testing.T) {
	c, byCopy, byStatements := copyTrio(t, `CREATE TABLE ruled (k int, v text); CREATE TABLE audited (k int PRIMARY KEY, v text)`)
	for i := 1; i <= 2; i++ {
		c.local(i, `CREATE TABLE seen (what text);
			CREATE RULE log_insert AS ON INSERT TO ruled DO ALSO INSERT INTO seen VALUES ('rule ' || NEW.k);
			ALTER TABLE ruled ENABLE ALWAYS RULE log_insert;
			CREATE FUNCTION note_update() RETURNS trigger LANGUAGE plpgsql AS
				$$BEGIN INSERT INTO seen VALUES ('update statement'); RETURN NULL; END$$;
			CREATE TRIGGER note_update AFTER UPDATE ON audited FOR EACH STATEMENT EXECUTE FUNCTION note_update();
			ALTER TABLE audited ENABLE REPLICA TRIGGER note_update`)
	}
	span := asSpan(c.commitEach(
		`INSERT INTO ruled SELECT g, 'r' FROM generate_series(1, 50) AS g; INSERT INTO audited SELECT g, 'a' FROM generate_series(1, 50) AS g`,
		`INSERT INTO audited SELECT g, 'b' FROM generate_series(51, 90) AS g`,
	))
	byCopy.applySpan(t, span)
	byStatements.applySpan(t, span)

	sameRows(t, c, "ruled", "k")
	sameRows(t, c, "audited", "k")
	seen := func(nd *node) string {
		return strings.Join(queryStrings(t, nd.connect(t), `SELECT what FROM seen ORDER BY 1`), ", ")
	}
	if a, b := seen(byCopy), seen(byStatements); a != b || !strings.Contains(a, "rule 50") || !strings.Contains(a, "update statement") {
		t.Errorf("the rule and the trigger did on the COPY applier: %s\nand with the statements: %s", a, b)
	}
	if rows, _ := byCopy.applier.Copies.Read(); rows != 0 {
		t.Errorf("%d rows copied into tables with rules or statement triggers", rows)
	}
}

// A COPY refused on an integrity constraint is remembered for its table:
// a span whose every fragment meets rows that exist here falls back once,
// in its first fragment; the later fragments give that table's rows to
// the upsert at once, and still copy another table's.
func TestCopyFallsBackOncePerTableAcrossASpansFragments(t *testing.T) {
	c, byCopy, byStatements := copyTrio(t, `CREATE TABLE kv (k int PRIMARY KEY, v text); CREATE TABLE other (k int PRIMARY KEY, v text)`)
	for i := 1; i <= 2; i++ {
		c.local(i, `INSERT INTO kv SELECT g, 'stale' FROM generate_series(1, 60) AS g WHERE g % 20 = 5`)
	}
	ins := func(from, to int) string {
		return fmt.Sprintf(`INSERT INTO kv SELECT g, 'new' FROM generate_series(%[1]d, %[2]d) AS g;
			INSERT INTO other SELECT g, 'new' FROM generate_series(%[1]d, %[2]d) AS g`, from, to)
	}
	span := asSpan(c.commitEach(ins(1, 20), ins(21, 40), ins(41, 60)))
	byCopy.applySpan(t, span)
	byStatements.applySpan(t, span)

	sameRows(t, c, "kv", "k")
	sameRows(t, c, "other", "k")
	rows, fallbacks := byCopy.applier.Copies.Read()
	if fallbacks != 1 || rows != 40 {
		t.Errorf("fell back %d times and copied %d rows; want 1 (the first fragment) and 40 (other's rows of the later fragments)", fallbacks, rows)
	}
}

// Capture marks no updated row of a table that a foreign key references
// through a unique index other than its primary key keeps_row: such a
// table is never loaded by COPY, so a large UPDATE of it goes to the
// upsert, without a refused COPY.
func TestCopyLeavesATableReferencedThroughAnotherUniqueIndexToTheUpsert(t *testing.T) {
	c := newCluster(t, 2)
	c.nodes[1].applier.copyRowsMin = copyRowsMin
	c.commit(0, `CREATE TABLE p (id int PRIMARY KEY, code text UNIQUE, v int); CREATE TABLE ch (code text REFERENCES p (code))`)
	c.commit(0, `INSERT INTO p SELECT g, 'c' || g, 0 FROM generate_series(1, 1500) AS g`)
	c.catchUp(1)
	c.commit(0, `UPDATE p SET v = v + 1`)
	c.catchUp(1)

	sameRows(t, c, "p", "id")
	if rows, fallbacks := c.nodes[1].applier.Copies.Read(); rows != 0 || fallbacks != 0 {
		t.Errorf("copied %d rows into p and fell back %d times; want none", rows, fallbacks)
	}
}

// Rows deleted and inserted again with the same keys exist here. Where
// the delete and the insert are versions of one step, the step tells, and
// gives those rows to the upsert; where they are one transaction's (a
// table refreshed), its writeset holds the insert alone, COPY is refused
// once, and the table keeps to the statements from there on.
func TestCopyLeavesRowsDeletedAndInsertedAgainToTheUpsert(t *testing.T) {
	c := newCluster(t, 2)
	ap := c.nodes[1].applier
	ap.copyRowsMin = copyRowsMin
	c.commit(0, `CREATE TABLE r (id int PRIMARY KEY, v int)`)
	c.commit(0, `INSERT INTO r SELECT g, 0 FROM generate_series(1, 1500) AS g`)
	c.catchUp(1)
	copied, _ := ap.Copies.Read()
	c.commit(0, `DELETE FROM r`)
	c.commit(0, `INSERT INTO r SELECT g, 1 FROM generate_series(1, 3000) AS g`)
	c.catchUp(1)
	sameRows(t, c, "r", "id")
	rows, fallbacks := ap.Copies.Read()
	if fallbacks != 0 || rows-copied != 1500 {
		t.Errorf("a delete and an insert in one step copied %d rows and fell back %d times; want 1500 (the keys not deleted first) and none", rows-copied, fallbacks)
	}

	for v := 2; v <= 3; v++ {
		c.commit(0, fmt.Sprintf(`DELETE FROM r; INSERT INTO r SELECT g, %d FROM generate_series(1, 3000) AS g`, v))
		c.catchUp(1)
	}
	sameRows(t, c, "r", "id")
	if _, fallbacks = ap.Copies.Read(); fallbacks != 1 {
		t.Errorf("two refreshes fell back %d times, want 1 (the first)", fallbacks)
	}
}
