package guarantees_test

import (
	"context"
	"testing"

	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// User triggers that write the table their own statement wrote. The
// statement such a trigger runs (a nested statement) fires its capture
// before the statement that fired the trigger; the writeset must still
// say what the table holds at the end, since the other replicas apply the
// writeset with user triggers off (session_replication_role = replica),
// not the statements (Tashkent §4).
func TestUserTriggerWritingItsOwnTableConverges(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	r1 := c.Connect(0)
	for _, sql := range []string{
		`CREATE TABLE tp (id int PRIMARY KEY, v text, modified timestamptz)`,
		`INSERT INTO tp SELECT g, 'v' || g, NULL FROM generate_series(1, 6) AS g`,
		`CREATE FUNCTION tp_touch() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			UPDATE tp SET modified = clock_timestamp() WHERE id = NEW.id;
			RETURN NULL;
		END $$`,
		`CREATE FUNCTION tp_purge() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			DELETE FROM tp WHERE id = NEW.id;
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER tp_touch AFTER INSERT OR UPDATE OF v ON tp FOR EACH ROW WHEN (NEW.v <> 'del') EXECUTE FUNCTION tp_touch()`,
		`CREATE TRIGGER tp_purge AFTER UPDATE OF v ON tp FOR EACH ROW WHEN (NEW.v = 'del') EXECUTE FUNCTION tp_purge()`,
	} {
		execSQL(t, r1, sql)
	}
	execSQL(t, r1, `UPDATE tp SET v = 'x' WHERE id = 1`)
	execSQL(t, r1, `UPDATE tp SET v = 'del' WHERE id = 2`)
	execSQL(t, r1, `UPDATE tp SET v = CASE id WHEN 3 THEN 'del' ELSE 'y' END WHERE id IN (3, 4)`)
	execSQL(t, r1, `INSERT INTO tp (id, v) VALUES (7, 'new')`)
	tx := begin(t, r1)
	for _, sql := range []string{
		`UPDATE tp SET v = 'z' WHERE id = 5`,
		`UPDATE tp SET v = 'del' WHERE id = 6`,
		`INSERT INTO tp (id, v) VALUES (8, 'plain') ON CONFLICT DO NOTHING`,
	} {
		if _, err := tx.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.converge() // every table equal on both replicas
	want := "1:x:touched 4:y:touched 5:z:touched 7:new:touched 8:plain:touched"
	for i := range 2 {
		got := c.textOn(i, `SELECT string_agg(id || ':' || v || ':' || CASE WHEN modified IS NULL THEN 'untouched' ELSE 'touched' END, ' ' ORDER BY id) FROM tp`)
		if got != want {
			t.Errorf("replica %d holds %q, want %q (the triggers' deletes and updates)", i+1, got, want)
		}
	}
}

// Nested triggers across tables: an AFTER trigger on orders writes an
// audit row and updates a stock row, whose own trigger writes a history
// row; a BEFORE trigger rewrites the order's row; a deletion cascades
// through a foreign key. The other replicas get the rows the triggers
// wrote (their user triggers do not run there), each once.
func TestNestedTriggersReplicateWhatTheyWrote(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	r1 := c.Connect(0)
	for _, sql := range []string{
		`CREATE TABLE stock (item text PRIMARY KEY, qty int NOT NULL)`,
		`CREATE TABLE stock_history (id bigserial PRIMARY KEY, item text, qty int)`,
		`CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL REFERENCES stock, qty int NOT NULL, note text)`,
		`CREATE TABLE order_lines (order_id int REFERENCES orders ON DELETE CASCADE, line int, PRIMARY KEY (order_id, line))`,
		`CREATE TABLE audit (id bigserial PRIMARY KEY, what text)`,
		`INSERT INTO stock VALUES ('apple', 100), ('pear', 50)`,
		`CREATE FUNCTION orders_before() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.note := coalesce(NEW.note, 'checked'); RETURN NEW; END $$`,
		`CREATE FUNCTION orders_after() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO audit (what) VALUES (TG_OP || ' order ' || coalesce(NEW.id, OLD.id));
			IF TG_OP = 'INSERT' THEN
				UPDATE stock SET qty = qty - NEW.qty WHERE item = NEW.item;
				INSERT INTO order_lines SELECT NEW.id, g FROM generate_series(1, NEW.qty) AS g;
			END IF;
			RETURN NULL;
		END $$`,
		`CREATE FUNCTION stock_after() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO stock_history (item, qty) VALUES (NEW.item, NEW.qty); RETURN NULL; END $$`,
		`CREATE TRIGGER orders_before BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_before()`,
		`CREATE TRIGGER orders_after AFTER INSERT OR DELETE ON orders FOR EACH ROW EXECUTE FUNCTION orders_after()`,
		`CREATE TRIGGER stock_after AFTER UPDATE ON stock FOR EACH ROW EXECUTE FUNCTION stock_after()`,
	} {
		execSQL(t, r1, sql)
	}
	execSQL(t, r1, `INSERT INTO orders (id, item, qty) VALUES (1, 'apple', 3)`)
	execSQL(t, r1, `BEGIN; INSERT INTO orders (id, item, qty) VALUES (2, 'pear', 2), (3, 'apple', 1); DELETE FROM orders WHERE id = 1; COMMIT`)
	c.converge()
	r2 := c.Connect(1)
	execSQL(t, r2, `INSERT INTO orders (id, item, qty, note) VALUES (4, 'pear', 1, 'from replica 2')`)
	c.converge()
	for i := range 2 {
		for sql, want := range map[string]string{
			`SELECT string_agg(item || '=' || qty, ' ' ORDER BY item) FROM stock`:                            "apple=96 pear=47",
			`SELECT string_agg(id || ':' || note, ' ' ORDER BY id) FROM orders`:                              "2:checked 3:checked 4:from replica 2",
			`SELECT count(*)::text FROM order_lines`:                                                         "4",
			`SELECT count(*)::text FROM stock_history`:                                                       "4",
			`SELECT string_agg(what, ', ' ORDER BY what) FROM audit`:                                         "DELETE order 1, INSERT order 1, INSERT order 2, INSERT order 3, INSERT order 4",
			`SELECT count(*)::text FROM (SELECT what FROM audit GROUP BY what HAVING count(*) > 1) AS twice`: "0",
		} {
			if got := c.textOn(i, sql); got != want {
				t.Errorf("replica %d: %s: %q, want %q", i+1, sql, got, want)
			}
		}
	}
}
