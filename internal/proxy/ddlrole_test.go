package proxy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// The other replicas run replicated DDL as a superuser, so DDL written by a
// role that is not one is refused at COMMIT (ddlrole.go). Before, a role
// with nothing but CREATE on a schema became a superuser on every other
// replica with
//
//	CREATE FUNCTION public.esc() ... IF current_user is a superuser THEN ALTER ROLE mallory SUPERUSER ...
//	ALTER TABLE public.m ADD COLUMN w int DEFAULT public.esc();
//
// (reproduced on a `tashkent up` cluster at 575a4ac). Proxy 2 here trusts
// such roles (--trust-ddl-roles) and replicates their DDL as before; proxy 1
// does not.
func TestDDLOfARoleThatIsNotASuperuserIsRefused(t *testing.T) {
	c := startClusterWith(t, 2, func(i int, cfg *proxy.Config) { cfg.TrustDDLRoles = i == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.connect(0)
	execSQL(t, admin, `CREATE ROLE mallory LOGIN`)
	execSQL(t, admin, `GRANT CREATE ON SCHEMA public TO mallory`)
	execSQL(t, admin, `CREATE TABLE notes (id int PRIMARY KEY, body text)`)
	execSQL(t, admin, `GRANT SELECT, INSERT ON notes TO mallory`)
	c.converge(10 * time.Second)

	mallory := c.connectWith(0, func(cfg *pgx.ConnConfig) { cfg.User = "mallory" })
	const escalate = `CREATE FUNCTION public.esc() RETURNS int LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
				EXECUTE 'ALTER ROLE mallory SUPERUSER';
			END IF;
			RETURN 0;
		END $$`
	_, err := mallory.Exec(ctx, escalate)
	assertDDLRefused(t, err, `CREATE FUNCTION`)

	tx, err := mallory.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`CREATE TABLE public.m (id int PRIMARY KEY)`, `INSERT INTO notes VALUES (1, 'with DDL')`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	assertDDLRefused(t, tx.Commit(ctx), `CREATE TABLE`)

	// Nothing of those transactions exists anywhere.
	for i := range 2 {
		var objects int
		if err := c.direct(i).QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_proc WHERE proname = 'esc')
			+ (SELECT count(*) FROM pg_class WHERE relname = 'm') + (SELECT count(*) FROM notes)`).Scan(&objects); err != nil {
			t.Fatal(err)
		}
		if objects != 0 {
			t.Errorf("replica %d holds %d objects or rows of the refused transactions", i+1, objects)
		}
	}

	// What stays on the replica, and DDL undone by ROLLBACK TO, is not refused.
	for _, sql := range []string{
		`CREATE TEMP TABLE scratch (n int)`,
		`ALTER TABLE scratch ADD COLUMN m int`,
		`BEGIN; SAVEPOINT a; CREATE TABLE public.undone (id int PRIMARY KEY); ROLLBACK TO a; INSERT INTO notes VALUES (2, 'after an undone DDL'); COMMIT`,
	} {
		if _, err := mallory.Exec(ctx, sql); err != nil {
			t.Errorf("%s as mallory: %v", sql, err)
		}
	}

	// A superuser's DDL is replicated.
	execSQL(t, admin, `CREATE TABLE public.by_admin (id int PRIMARY KEY)`)

	// Through the proxy that trusts roles, mallory's DDL is replicated.
	trusted := c.connectWith(1, func(cfg *pgx.ConnConfig) { cfg.User = "mallory" })
	execSQL(t, trusted, `CREATE TABLE public.by_mallory (id int PRIMARY KEY)`)

	c.converge(10 * time.Second)
	for i := range 2 {
		var tables, notes int
		if err := c.direct(i).QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE relname IN ('by_admin', 'by_mallory')),
			(SELECT count(*) FROM notes WHERE id = 2)`).Scan(&tables, &notes); err != nil {
			t.Fatal(err)
		}
		if tables != 2 || notes != 1 {
			t.Errorf("replica %d: %d of the 2 replicated tables, %d of mallory's row after her undone DDL", i+1, tables, notes)
		}
	}
}

func assertDDLRefused(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "only from superusers") ||
		!strings.Contains(pgErr.Detail, what) || !strings.Contains(pgErr.Hint, "--trust-ddl-roles") {
		t.Fatalf("%s as a role that is not a superuser: %v, want 42501 naming the statement, with a hint", what, err)
	}
}
