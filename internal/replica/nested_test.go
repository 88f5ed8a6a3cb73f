package replica

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

// Nested statements: a statement run inside a user trigger has its own
// capture fire at its end, which for an AFTER ROW trigger (or an AFTER
// STATEMENT trigger that sorts before tashkent_capture_*) is before the
// capture of the outer statement whose trigger ran it. Recorded in that
// order, the events say the outer change came last, and the other replicas
// end with the outer row (Tashkent paper §4: a writeset must hold the
// transaction's final effects, since remote replicas apply it instead of
// re-running the statements). Each case commits one transaction and checks
// that the collapsed writeset names every key it should and that each of
// its upserts and deletes is the table's final state for that key.

// nestedSchema holds the tables of the cases; their user triggers are
// created after Install (nestedTriggers), so the initial rows go in
// without them.
const nestedSchema = `
CREATE TABLE del_t (id int PRIMARY KEY, v text);
CREATE TABLE mod_t (id int PRIMARY KEY, v text, modified int NOT NULL DEFAULT 0);
CREATE TABLE rekey_t (id int PRIMARY KEY, v text);
CREATE TABLE stmt_t (id int PRIMARY KEY, v text, modified int NOT NULL DEFAULT 0);
CREATE TABLE before_t (id int PRIMARY KEY, v text);
CREATE TABLE outer_t (id int PRIMARY KEY, v text);
CREATE TABLE inner_t (id int PRIMARY KEY, v text);
CREATE TABLE wide_t (a int, b text, v text, PRIMARY KEY (b, a));
CREATE TABLE uniq_t (id int PRIMARY KEY, email text UNIQUE, v text, modified int NOT NULL DEFAULT 0);
CREATE TABLE part_t (id int, r int, v text, modified int NOT NULL DEFAULT 0, PRIMARY KEY (id, r)) PARTITION BY RANGE (r);
CREATE TABLE part_t1 PARTITION OF part_t FOR VALUES FROM (0) TO (10);
CREATE TABLE part_t2 PARTITION OF part_t FOR VALUES FROM (10) TO (20);
CREATE TABLE plain_t (id int PRIMARY KEY, v text);
CREATE TABLE undel_t (id int PRIMARY KEY, v text);
CREATE TABLE num_t (id numeric PRIMARY KEY, v text);
-- Key columns named like the state path's own column names.
CREATE TABLE alias1_t (tashkent_j int PRIMARY KEY, v text, modified int NOT NULL DEFAULT 0);
CREATE TABLE alias2_t (tashkent_r int, tashkent_j text, v text, modified int NOT NULL DEFAULT 0,
	PRIMARY KEY (tashkent_j, tashkent_r));
-- Key columns named like the state path's aliases (tashkent_q, the key
-- columns' tashkent_c1..n in another order) and its derived tables (k, t,
-- s), and a table named like its table alias.
CREATE TABLE alias3_t (tashkent_c2 int, tashkent_q int, k int, t int, s int, tashkent_c1 int, tashkent_kk int,
	v text, modified int NOT NULL DEFAULT 0, PRIMARY KEY (tashkent_c2, tashkent_q));
CREATE TABLE tashkent_q (tashkent_q int PRIMARY KEY, v text, modified int NOT NULL DEFAULT 0);
INSERT INTO del_t VALUES (1, 'a'), (2, 'b'), (3, 'c');
INSERT INTO mod_t VALUES (1, 'a'), (2, 'b'), (3, 'c');
INSERT INTO stmt_t VALUES (1, 'a'), (2, 'b');
INSERT INTO before_t VALUES (1, 'old'), (2, 'keep');
INSERT INTO outer_t VALUES (1, 'a'), (2, 'b');
INSERT INTO inner_t VALUES (1, 'a'), (2, 'b');
INSERT INTO wide_t VALUES (1, 'x', 'a'), (2, 'x', 'b');
INSERT INTO uniq_t VALUES (1, 'a@x', 'a'), (2, 'b@x', 'b');
INSERT INTO part_t VALUES (1, 1, 'a'), (2, 11, 'b');
INSERT INTO plain_t VALUES (1, 'a');
INSERT INTO undel_t VALUES (1, 'a'), (2, 'b');
INSERT INTO num_t VALUES (1.5, 'a');
INSERT INTO alias1_t VALUES (1, 'a');
INSERT INTO alias2_t VALUES (1, 'x', 'a');
INSERT INTO alias3_t VALUES (1, 2, 3, 4, 5, 6, 7, 'a');
INSERT INTO tashkent_q VALUES (1, 'a');`

// nestedTriggers are the user triggers: each writes the table its own
// statement wrote.
const nestedTriggers = `
CREATE FUNCTION del_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('DELETE FROM %I WHERE id = $1', TG_TABLE_NAME) USING NEW.id;
	RETURN NULL;
END $$;
CREATE TRIGGER del_after AFTER UPDATE ON del_t FOR EACH ROW WHEN (NEW.v = 'del') EXECUTE FUNCTION del_row();

CREATE FUNCTION touch_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('UPDATE %I SET modified = modified + 1 WHERE id = $1', TG_TABLE_NAME) USING NEW.id;
	RETURN NULL;
END $$;
CREATE TRIGGER touch_after AFTER INSERT OR UPDATE OF v ON mod_t FOR EACH ROW EXECUTE FUNCTION touch_row();
CREATE TRIGGER touch_after AFTER UPDATE OF v ON uniq_t FOR EACH ROW EXECUTE FUNCTION touch_row();

CREATE FUNCTION rekey_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE rekey_t SET id = id + 100 WHERE id = NEW.id;
	RETURN NULL;
END $$;
CREATE TRIGGER rekey_after AFTER INSERT ON rekey_t FOR EACH ROW WHEN (NEW.id < 100) EXECUTE FUNCTION rekey_row();

-- Statement triggers fire in name order: a_touch before tashkent_capture_upd.
CREATE FUNCTION touch_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF pg_trigger_depth() = 1 THEN
		UPDATE stmt_t SET modified = modified + 1 WHERE id IN (SELECT id FROM nt);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER a_touch AFTER UPDATE ON stmt_t REFERENCING NEW TABLE AS nt
	FOR EACH STATEMENT EXECUTE FUNCTION touch_stmt();

-- An upsert by trigger: the nested delete really comes first.
CREATE FUNCTION replace_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM before_t WHERE id = NEW.id;
	RETURN NEW;
END $$;
CREATE TRIGGER replace_before BEFORE INSERT ON before_t FOR EACH ROW EXECUTE FUNCTION replace_row();

-- Depth 3: a statement on outer_t updates inner_t (capture at depth 2),
-- whose trigger deletes the row it updated (capture at depth 3).
CREATE FUNCTION copy_to_inner() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE inner_t SET v = NEW.v WHERE id = NEW.id;
	RETURN NULL;
END $$;
CREATE TRIGGER copy_after AFTER UPDATE ON outer_t FOR EACH ROW EXECUTE FUNCTION copy_to_inner();
CREATE TRIGGER del_after AFTER UPDATE ON inner_t FOR EACH ROW WHEN (NEW.v = 'del') EXECUTE FUNCTION del_row();

-- A wider key (tashkent.capture, not capture_key).
CREATE FUNCTION del_wide() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM wide_t WHERE a = NEW.a AND b = NEW.b;
	RETURN NULL;
END $$;
CREATE TRIGGER del_after AFTER UPDATE ON wide_t FOR EACH ROW WHEN (NEW.v = 'del') EXECUTE FUNCTION del_wide();

-- A partitioned table: rows are captured under the root's name.
CREATE FUNCTION touch_part() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE part_t SET modified = modified + 1 WHERE id = NEW.id AND r = NEW.r;
	RETURN NULL;
END $$;
CREATE TRIGGER touch_after AFTER UPDATE OF v ON part_t FOR EACH ROW EXECUTE FUNCTION touch_part();

-- A delete the trigger undoes.
CREATE FUNCTION restore_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO undel_t VALUES (OLD.id, 'restored');
	RETURN NULL;
END $$;
CREATE TRIGGER restore_after AFTER DELETE ON undel_t FOR EACH ROW WHEN (OLD.id = 1) EXECUTE FUNCTION restore_row();

-- A key the trigger sets to an equal value that prints differently.
CREATE FUNCTION widen_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE num_t SET id = 1.50 WHERE id = NEW.id;
	RETURN NULL;
END $$;
CREATE TRIGGER widen_after AFTER UPDATE OF v ON num_t FOR EACH ROW EXECUTE FUNCTION widen_key();

-- Tables with key columns named like the state path's own names: the
-- trigger's arguments are the key columns.
CREATE FUNCTION touch_keyed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('UPDATE %I SET modified = modified + 1 WHERE ', TG_TABLE_NAME)
		|| (SELECT string_agg(format('%I = ($1).%I', c, c), ' AND ') FROM unnest(TG_ARGV) AS c)
		USING NEW;
	RETURN NULL;
END $$;
CREATE TRIGGER touch_after AFTER UPDATE OF v ON alias1_t FOR EACH ROW EXECUTE FUNCTION touch_keyed('tashkent_j');
CREATE TRIGGER touch_after AFTER UPDATE OF v ON alias2_t FOR EACH ROW EXECUTE FUNCTION touch_keyed('tashkent_j', 'tashkent_r');
CREATE TRIGGER touch_after AFTER UPDATE OF v ON alias3_t FOR EACH ROW EXECUTE FUNCTION touch_keyed('tashkent_c2', 'tashkent_q');
CREATE TRIGGER touch_after AFTER UPDATE OF v ON tashkent_q FOR EACH ROW EXECUTE FUNCTION touch_keyed('tashkent_q');`

// tablePK gives the key columns of the cases' tables, to find the row a
// writeset key names.
var tablePK = map[string][]string{
	"public.del_t": {"id"}, "public.mod_t": {"id"}, "public.rekey_t": {"id"}, "public.stmt_t": {"id"},
	"public.before_t": {"id"}, "public.outer_t": {"id"}, "public.inner_t": {"id"}, "public.wide_t": {"b", "a"},
	"public.uniq_t": {"id"}, "public.part_t": {"id", "r"}, "public.plain_t": {"id"}, "public.undel_t": {"id"}, "public.num_t": {"id"},
	"public.alias1_t": {"tashkent_j"}, "public.alias2_t": {"tashkent_j", "tashkent_r"},
	"public.alias3_t": {"tashkent_c2", "tashkent_q"}, "public.tashkent_q": {"tashkent_q"},
}

func TestCaptureNestedStatements(t *testing.T) {
	srv, admin := instance(t, nestedSchema)
	mustExec(t, admin, nestedTriggers)
	s := session(t, srv)
	version := uint64(0)
	// commit takes the subtest's t: a case that fails fails alone, and the
	// cases after it still run (a parent's Fatal called from a subtest
	// stopped them all).
	commit := func(t *testing.T, sql string) []*certifierpb.Change {
		version++
		return commitLocal(t, s, version, sql).GetWriteset().GetChanges()
	}

	cases := []struct {
		name string
		sql  string
		// want are writeset entries that must be there ("D table key" or
		// "U table key"); every row event is also checked against the table.
		want []string
	}{
		{"after row delete", `UPDATE del_t SET v = 'del' WHERE id = 2`,
			[]string{"D public.del_t [2]"}},
		{"after row delete, several rows", `UPDATE del_t SET v = CASE id WHEN 1 THEN 'del' ELSE 'kept' END WHERE id IN (1, 3)`,
			[]string{"D public.del_t [1]", "U public.del_t [3]"}},
		{"after row update of another column", `UPDATE mod_t SET v = 'w' WHERE id = 1`,
			[]string{"U public.mod_t [1]"}},
		{"after insert update of another column", `INSERT INTO mod_t (id, v) VALUES (4, 'd')`,
			[]string{"U public.mod_t [4]"}},
		{"upsert: the update and insert captures of one statement",
			`INSERT INTO mod_t (id, v) VALUES (2, 'x'), (5, 'e') ON CONFLICT (id) DO UPDATE SET v = excluded.v`,
			[]string{"U public.mod_t [2]", "U public.mod_t [5]"}},
		{"merge: the update and insert captures of one statement",
			`MERGE INTO mod_t AS t USING (VALUES (1, 'm'), (6, 'f')) AS x(id, v) ON t.id = x.id
				WHEN MATCHED THEN UPDATE SET v = x.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (x.id, x.v)`,
			[]string{"U public.mod_t [1]", "U public.mod_t [6]"}},
		{"after row delete undone by the trigger", `DELETE FROM undel_t`,
			[]string{"U public.undel_t [1]", "D public.undel_t [2]"}},
		{"key set to an equal value printed differently", `UPDATE num_t SET v = 'w'`,
			[]string{"D public.num_t [1.5]", "U public.num_t [1.50]"}},
		{"after row re-key", `INSERT INTO rekey_t VALUES (1, 'a')`,
			[]string{"D public.rekey_t [1]", "U public.rekey_t [101]"}},
		{"after statement trigger sorting before capture", `UPDATE stmt_t SET v = 'w'`,
			[]string{"U public.stmt_t [1]", "U public.stmt_t [2]"}},
		{"before insert delete-then-insert", `INSERT INTO before_t VALUES (1, 'new')`,
			[]string{"U public.before_t [1]"}},
		{"nesting depth 3", `UPDATE outer_t SET v = 'del' WHERE id = 1`,
			[]string{"U public.outer_t [1]", "D public.inner_t [1]"}},
		{"wider key", `UPDATE wide_t SET v = 'del' WHERE a = 1`,
			[]string{`D public.wide_t ["x",1]`}},
		{"unique index", `UPDATE uniq_t SET v = 'w', email = 'c@x' WHERE id = 1`,
			[]string{"U public.uniq_t [1]", "K public.uniq_t#uniq_t_email_key [\"c@x\"]"}},
		{"partitioned table", `UPDATE part_t SET v = 'w' WHERE id = 2`,
			[]string{"U public.part_t [2,11]"}},
		{"a key column named like the state path's columns", `UPDATE alias1_t SET v = 'w'`,
			[]string{"U public.alias1_t [1]"}},
		{"wider key columns named like the state path's columns", `UPDATE alias2_t SET v = 'w'`,
			[]string{`U public.alias2_t ["x",1]`}},
		{"key columns named like the state path's aliases", `UPDATE alias3_t SET v = 'w'`,
			[]string{"U public.alias3_t [1,2] (1,2,3,4,5,6,7,w,1)"}},
		{"a table and its key column named like the state path's table alias", `UPDATE tashkent_q SET v = 'w'`,
			[]string{"U public.tashkent_q [1] (1,w,1)"}},
		{"later statement in the transaction", `UPDATE mod_t SET v = 'y' WHERE id = 3; UPDATE plain_t SET v = 'b' WHERE id = 1`,
			[]string{"U public.mod_t [3]", "U public.plain_t [1]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := commit(t, tc.sql)
			got := changes(ws)
			for _, w := range tc.want {
				if !hasEntry(got, w) {
					t.Errorf("writeset lacks %q:\n  %s", w, strings.Join(got, "\n  "))
				}
			}
			for _, c := range ws {
				checkFinalState(t, s, c)
			}
		})
	}
}

// hasEntry reports whether one of the changes starts with "op table key"
// (an upsert's row follows its key).
func hasEntry(got []string, want string) bool {
	for _, g := range got {
		if g == want || strings.HasPrefix(g, want+" ") {
			return true
		}
	}
	return false
}

// checkFinalState checks one row event of a committed writeset against the
// table: an upsert must carry the row the table holds under that key, a
// delete must name a key no row has.
func checkFinalState(t *testing.T, s *pgx.Conn, c *certifierpb.Change) {
	t.Helper()
	op := c.GetOp()
	if op != certifierpb.Op_OP_UPSERT && op != certifierpb.Op_OP_DELETE {
		return
	}
	pk, ok := tablePK[c.GetTable()]
	if !ok {
		t.Fatalf("no key columns known for %s", c.GetTable())
	}
	rows, err := s.Query(tctx(t), fmt.Sprintf(`SELECT x::text FROM %s AS x
		WHERE '[' || array_to_string(ARRAY(SELECT (to_json(x) -> u.c)::text
			FROM unnest($2::text[]) WITH ORDINALITY AS u(c, o) ORDER BY u.o), ',') || ']' = $1`, c.GetTable()),
		string(c.GetKey()), pk)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case op == certifierpb.Op_OP_DELETE && len(found) != 0:
		t.Errorf("%s: the table still holds %v", change(c), found)
	case op == certifierpb.Op_OP_UPSERT && (len(found) != 1 || found[0] != string(c.GetRow())):
		t.Errorf("%s: the table holds %v", change(c), found)
	}
}

// TestCaptureNestedStateUsesThePrimaryKey: the state path's lookup of the
// statement's keys goes through the primary key index, not a scan of the
// table (auto_explain prints the plans of the capture function's nested
// statements as notices).
func TestCaptureNestedStateUsesThePrimaryKey(t *testing.T) {
	srv, admin := instance(t, `
		CREATE TABLE big (id int PRIMARY KEY, v text, modified int NOT NULL DEFAULT 0);
		INSERT INTO big SELECT g, 'v', 0 FROM generate_series(1, 20000) AS g;
		ANALYZE big;`)
	mustExec(t, admin, `
		CREATE FUNCTION touch_big() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			UPDATE big SET modified = modified + 1 WHERE id = NEW.id;
			RETURN NULL;
		END $$;
		CREATE TRIGGER touch_after AFTER UPDATE OF v ON big FOR EACH ROW EXECUTE FUNCTION touch_big();`)
	cfg, err := pgx.ParseConfig(srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	s, err := pgx.ConnectConfig(tctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	if err := PrepareSession(tctx(t), s); err != nil {
		t.Fatal(err)
	}
	mustExec(t, s, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
		SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice`)
	ws := commitLocal(t, s, 1, `UPDATE big SET v = 'w' WHERE id = 7`)
	eqStrings(t, "writeset", changes(ws.GetWriteset().GetChanges()), []string{"U public.big [7] (7,w,1)"})
	var plan string
	for _, n := range notices {
		if strings.Contains(n, "AS tashkent_kk") {
			plan = n
		}
	}
	if plan == "" {
		t.Fatalf("no plan of the state path's statement among the notices:\n%s", strings.Join(notices, "\n---\n"))
	}
	if !strings.Contains(plan, "big_pkey") || strings.Contains(plan, "Seq Scan on big") {
		t.Errorf("the state path does not look the keys up through big_pkey:\n%s", plan)
	}
}
