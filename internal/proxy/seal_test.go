package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// TestAClientCannotForgeTheWritesetBuffer is the report's attack, end to
// end: mallory, a role with no rights on salaries, inserts an upsert of
// salaries into her session's writeset buffer through replica 0's proxy
// and commits. Before the buffer was sealed (see "Trust model" in
// internal/replica/doc.go), the proxy collected her row at COMMIT,
// certified it, and replica 1 applied it as superuser: salaries there held
// (1,999999). Now the INSERT fails with 42501, the COMMIT rolls back, and
// nothing reaches replica 1; nor can she read, empty or take the buffer,
// or replace it with a table of her own. Her own writes still replicate.
func TestAClientCannotForgeTheWritesetBuffer(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.connect(0)
	execSQL(t, admin, `CREATE ROLE mallory LOGIN`)
	execSQL(t, admin, `CREATE TABLE salaries (id int PRIMARY KEY, amount int)`)
	execSQL(t, admin, `CREATE TABLE notes (id int PRIMARY KEY, v text)`)
	execSQL(t, admin, `GRANT SELECT, INSERT ON notes TO mallory`)
	execSQL(t, admin, `INSERT INTO salaries VALUES (1, 100)`)
	c.converge(10 * time.Second)

	mallory := c.connectWith(0, func(cfg *pgx.ConnConfig) { cfg.User = "mallory" })
	if _, err := mallory.Exec(ctx, `SELECT * FROM salaries`); sqlState(err) != "42501" {
		t.Fatalf("mallory reads salaries: %v, want 42501", err)
	}
	forge := `INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row) VALUES ('public.salaries', 'U', '[1]', '(1,999999)')`
	tx, err := mallory.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO notes VALUES (1, 'cover')`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, forge); sqlState(err) != "42501" {
		t.Errorf("mallory's forged buffer row: %v, want 42501", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Errorf("the COMMIT of the transaction whose forged row failed succeeded")
	}
	for _, sql := range []string{
		`SELECT * FROM pg_temp.tashkent_writeset`,
		`DELETE FROM pg_temp.tashkent_writeset`,
		`SELECT * FROM tashkent.take_writeset(NULL)`,
		`DISCARD TEMP; CREATE TEMP TABLE tashkent_writeset (seq bigserial, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
			tbl text NOT NULL, op text NOT NULL, key text, row text)`,
	} {
		if _, err := mallory.Exec(ctx, sql); sqlState(err) != "42501" {
			t.Errorf("%s as mallory: %v, want 42501", sql, err)
		}
	}
	// Her own writes still go through, on the same session.
	execSQL(t, mallory, `INSERT INTO notes VALUES (2, 'own')`)
	c.converge(10 * time.Second)

	for i := 0; i < 2; i++ {
		var amount int
		if err := c.direct(i).QueryRow(ctx, `SELECT amount FROM salaries WHERE id = 1`).Scan(&amount); err != nil {
			t.Fatal(err)
		}
		if amount != 100 {
			t.Errorf("replica %d: salaries row 1 holds %d, want 100 (forged)", i, amount)
		}
		var notes int
		if err := c.direct(i).QueryRow(ctx, `SELECT count(*) FROM notes WHERE id = 2`).Scan(&notes); err != nil || notes != 1 {
			t.Errorf("replica %d: mallory's own note: %d rows (%v), want 1", i, notes, err)
		}
	}
}
