package capture_test

import (
	"slices"
	"testing"
)

// nestedSchema is the tables and triggers of the nested statements'
// tests: triggers that write the row their statement wrote, before and
// after tashkent's capture trigger fires.
var nestedSchema = []string{
	`CREATE TABLE n (id int PRIMARY KEY, v int)`,
	// After an update to 99, delete the row; fires before capture
	// (names sort so) and, in z_, after it.
	`CREATE FUNCTION delete_it() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM n WHERE id = NEW.id; RETURN NULL; END $$`,
	`CREATE TRIGGER a_delete AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v = 99) EXECUTE FUNCTION delete_it()`,
	`CREATE TRIGGER z_delete AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v = 98) EXECUTE FUNCTION delete_it()`,
	// After an update below 1000, add 1000: the row is updated again.
	`CREATE FUNCTION bump() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN UPDATE n SET v = v + 1000 WHERE id = NEW.id; RETURN NULL; END $$`,
	`CREATE TRIGGER a_bump AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v BETWEEN 10 AND 19) EXECUTE FUNCTION bump()`,
	`CREATE TRIGGER z_bump AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v BETWEEN 20 AND 29) EXECUTE FUNCTION bump()`,
	// After a delete, put the row back.
	`CREATE FUNCTION restore_it() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO n VALUES (OLD.id, -OLD.v); RETURN NULL; END $$`,
	`CREATE TRIGGER a_restore AFTER DELETE ON n FOR EACH ROW WHEN (OLD.v = 7) EXECUTE FUNCTION restore_it()`,
	// "Upsert by trigger": a BEFORE INSERT trigger deletes the row
	// with the key first. Its DELETE runs under a later command id
	// than the INSERT's, but before it.
	`CREATE TABLE ub (id int PRIMARY KEY, v int)`,
	`CREATE FUNCTION replace_row() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM ub WHERE id = NEW.id; RETURN NEW; END $$`,
	`CREATE TRIGGER b_replace BEFORE INSERT ON ub FOR EACH ROW EXECUTE FUNCTION replace_row()`,
	// A function that writes the row its caller's UPDATE wrote (here
	// from RETURNING, after which a_bump adds 1000).
	`CREATE FUNCTION touch(k int) RETURNS int LANGUAGE plpgsql AS $$
		BEGIN UPDATE n SET v = v * 10 WHERE id = k; RETURN k; END $$`,
}

// A statement nested in another (run by a trigger or a function) fires
// its row triggers at its own end, before the statement that ran it fires
// theirs, though its changes came later. The writeset must still hold
// the final state of every row: the other replicas apply it with user
// triggers off.
func TestNestedStatements(t *testing.T) {
	f := start(t, nestedSchema...)

	for _, c := range []struct {
		name, setup, sql string
		want             []string
	}{
		{"inner delete fired first", `INSERT INTO n VALUES (1, 1)`, `UPDATE n SET v = 99 WHERE id = 1`,
			[]string{`DELETE public.n [1]`}},
		{"inner delete fired last", `INSERT INTO n VALUES (2, 1)`, `UPDATE n SET v = 98 WHERE id = 2`,
			[]string{`DELETE public.n [2]`}},
		{"inner update fired first", `INSERT INTO n VALUES (3, 1)`, `UPDATE n SET v = 11 WHERE id = 3`,
			[]string{`UPSERT public.n [3] (3,1011) keeps`}},
		{"inner update fired last", `INSERT INTO n VALUES (4, 1)`, `UPDATE n SET v = 21 WHERE id = 4`,
			[]string{`UPSERT public.n [4] (4,1021) keeps`}},
		{"inner insert after the delete", `INSERT INTO n VALUES (5, 7)`, `DELETE FROM n WHERE id = 5`,
			[]string{`UPSERT public.n [5] (5,-7)`}},
		{"outer statement in a transaction with others", `INSERT INTO n VALUES (6, 1)`,
			`UPDATE n SET v = 2 WHERE id = 6; UPDATE n SET v = 11 WHERE id = 6; UPDATE n SET v = 3000 WHERE id = 6`,
			[]string{`UPSERT public.n [6] (6,3000) keeps`}},
		{"two levels", `INSERT INTO n VALUES (8, 1)`, `UPDATE n SET v = 12 WHERE id = 8; UPDATE n SET v = 99 WHERE id = 8`,
			[]string{`DELETE public.n [8]`}},
		{"before trigger's delete", `INSERT INTO ub VALUES (1, 1)`, `INSERT INTO ub VALUES (1, 2)`,
			[]string{`UPSERT public.ub [1] (1,2)`}},
		{"before trigger's delete in a transaction", `INSERT INTO ub VALUES (2, 1)`,
			`UPDATE ub SET v = 5 WHERE id = 2; INSERT INTO ub VALUES (2, 3); UPDATE ub SET v = v + 1 WHERE id = 2`,
			[]string{`UPSERT public.ub [2] (2,4)`}},
		{"function in a statement", `INSERT INTO n VALUES (9, 3)`, `SELECT touch(9); UPDATE n SET v = 17 WHERE id = 9 RETURNING touch(id)`,
			[]string{`UPSERT public.n [9] (9,1170) keeps`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.t = t
			f.exec(f.conn, c.setup)
			got := f.writeset(c.sql)
			if !slices.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
			// What the writeset says is what the table holds.
			rows := f.query(f.conn, `SELECT 'UPSERT public.n [' || id || '] ' || n::text FROM n WHERE id IN (1, 2, 3, 4, 5, 6, 8, 9)
				UNION ALL SELECT 'UPSERT public.ub [' || id || '] ' || ub::text FROM ub`)
			for _, w := range c.want {
				if w[:6] == "UPSERT" {
					found := false
					for _, r := range rows {
						found = found || (len(w) >= len(r) && w[:len(r)] == r)
					}
					if !found {
						t.Errorf("%s is not in the table: %q", w, rows)
					}
				}
			}
		})
	}
}

// A rolled-back savepoint, or an EXCEPTION block that caught an error,
// takes its changes with it.
func TestSubtransactions(t *testing.T) {
	f := start(t, `CREATE TABLE s (id int PRIMARY KEY)`)
	f.expect(`BEGIN; INSERT INTO s VALUES (1); SAVEPOINT a; INSERT INTO s VALUES (2); ROLLBACK TO a; INSERT INTO s VALUES (3); COMMIT`,
		`UPSERT public.s [1] (1)`, `UPSERT public.s [3] (3)`)
	f.expect(`BEGIN; SAVEPOINT a; INSERT INTO s VALUES (4); RELEASE a; COMMIT`, `UPSERT public.s [4] (4)`)
	f.expect(`BEGIN; SAVEPOINT a; INSERT INTO s VALUES (5); SAVEPOINT b; INSERT INTO s VALUES (6); RELEASE b;
		ROLLBACK TO a; INSERT INTO s VALUES (7); COMMIT`, `UPSERT public.s [7] (7)`)
	f.expect(`BEGIN; SAVEPOINT a; DELETE FROM s WHERE id = 1; ROLLBACK TO a; DELETE FROM s WHERE id = 3; ROLLBACK TO a; DELETE FROM s WHERE id = 4; COMMIT`,
		`DELETE public.s [4]`)
	f.expect(`DO $$
		BEGIN
			INSERT INTO s VALUES (8);
			BEGIN
				INSERT INTO s VALUES (9);
				INSERT INTO s VALUES (1);
			EXCEPTION WHEN unique_violation THEN NULL;
			END;
			BEGIN
				INSERT INTO s VALUES (10);
			EXCEPTION WHEN unique_violation THEN NULL;
			END;
		END $$`, `UPSERT public.s [8] (8)`, `UPSERT public.s [10] (10)`)
	// Everything rolled back: nothing to certify.
	if ws := f.writesets(f.conn, `BEGIN; SAVEPOINT a; INSERT INTO s VALUES (11); ROLLBACK TO a; COMMIT`); len(ws) != 0 {
		t.Errorf("a transaction whose writes all rolled back certified %q", ws)
	}
	if got := f.query(f.conn, `SELECT string_agg(id::text, ',' ORDER BY id) FROM s`); got[0] != "1,3,7,8,10" {
		t.Errorf("table holds %s", got[0])
	}
}
