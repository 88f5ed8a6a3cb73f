package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// User triggers that write the table their own statement wrote. The
// statement such a trigger runs (a nested statement) is captured before the
// outer statement that fired the trigger; recorded in that order, the
// writeset said the outer change came last, and the other replicas, which
// apply writesets with user triggers off (session_replication_role =
// replica), kept a row replica 1 had deleted or a row without the
// trigger's update (Tashkent paper §4: remote replicas apply the
// writeset, not the statements). Capture now records the keys' current
// state when a nested capture ran (internal/replica, "Nested statements").
func TestUserTriggerWritingItsOwnTableConverges(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	r1 := c.connect(0)
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

	// Through replica 1: single statements, several rows, and a
	// transaction mixing both triggers with a plain statement after them.
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

	c.converge(20 * time.Second) // checksums of every table equal on both replicas

	want := "1:x:touched 4:y:touched 5:z:touched 7:new:touched 8:plain:touched"
	for i := range 2 {
		var got string
		if err := c.direct(i).QueryRow(context.Background(),
			`SELECT string_agg(id || ':' || v || ':' || CASE WHEN modified IS NULL THEN 'untouched' ELSE 'touched' END, ' ' ORDER BY id)
			FROM tp`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("replica %d holds %q, want %q (the triggers' deletes and updates)", i+1, got, want)
		}
	}
}
