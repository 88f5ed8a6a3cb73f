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

// The other replicas run replicated DDL as a superuser, so the database
// refuses DDL by a role that is not one (replica/ddlguard.go). Before, a
// role with nothing but CREATE on a schema became a superuser on every
// other replica with
//
//	CREATE FUNCTION public.esc() ... IF current_user is a superuser THEN ALTER ROLE mallory SUPERUSER ...
//	ALTER TABLE public.m ADD COLUMN w int DEFAULT public.esc();
//
// (reproduced on a `tashkent up` cluster at 575a4ac). Proxy 2 here trusts
// such roles (--trust-ddl-roles); proxy 1 does not.
func TestDDLOfARoleThatIsNotASuperuserIsRefused(t *testing.T) {
	c := startClusterWith(t, 2, func(i int, cfg *proxy.Config) { cfg.TrustDDLRoles = i == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.connect(0)
	for _, sql := range []string{
		`CREATE ROLE mallory LOGIN`,
		`GRANT CREATE ON SCHEMA public TO mallory`,
		`CREATE TABLE notes (id int PRIMARY KEY, body text)`,
		`GRANT SELECT, INSERT ON notes TO mallory`,
		`CREATE TABLE owned (id int PRIMARY KEY)`,
		`ALTER TABLE owned OWNER TO mallory`,
	} {
		execSQL(t, admin, sql)
	}
	c.converge(10 * time.Second)

	mallory := c.connectWith(0, func(cfg *pgx.ConnConfig) { cfg.User = "mallory" })
	for _, refused := range []struct{ sql, what string }{
		{`CREATE FUNCTION public.esc() RETURNS int LANGUAGE plpgsql AS $$
			BEGIN
				IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
					EXECUTE 'ALTER ROLE mallory SUPERUSER';
				END IF;
				RETURN 0;
			END $$`, `CREATE FUNCTION changes public.esc()`},
		// Inside a DO block the proxy does not see the DDL; the database does.
		{`DO $$BEGIN CREATE TABLE public.sneaky (id int PRIMARY KEY); END$$`, `CREATE TABLE changes public.sneaky`},
		{`ALTER TABLE owned ADD COLUMN v int`, `ALTER TABLE changes public.owned`},
		{`DROP TABLE owned`, `DROP TABLE drops table public.owned`},
	} {
		_, err := mallory.Exec(ctx, refused.sql)
		assertDDLRefused(t, err, refused.what)
	}

	// The refusal fails the statement; a savepoint keeps the transaction.
	tx, err := mallory.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`INSERT INTO notes VALUES (1, 'kept')`, `SAVEPOINT a`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	_, err = tx.Exec(ctx, `CREATE TABLE public.m (id int PRIMARY KEY)`)
	assertDDLRefused(t, err, `CREATE TABLE changes public.m`)
	for _, sql := range []string{`ROLLBACK TO a`, `INSERT INTO notes VALUES (2, 'after the refusal')`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// What stays on the replica is allowed.
	for _, sql := range []string{
		`CREATE TEMP TABLE scratch (n int PRIMARY KEY)`,
		`ALTER TABLE scratch ADD COLUMN m int`,
		`CREATE INDEX ON scratch (m)`,
		`DROP TABLE scratch`,
	} {
		if _, err := mallory.Exec(ctx, sql); err != nil {
			t.Errorf("%s as mallory: %v", sql, err)
		}
	}

	// A connection that bypasses the proxy is refused the same way.
	directCfg, err := pgx.ParseConfig(c.dbs[0].DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	directCfg.User = "mallory"
	direct, err := pgx.ConnectConfig(ctx, directCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	_, err = direct.Exec(ctx, `CREATE TABLE public.bypass (id int PRIMARY KEY)`)
	assertDDLRefused(t, err, `CREATE TABLE changes public.bypass`)

	// A superuser's DDL is replicated; so is mallory's through the proxy
	// that trusts roles.
	execSQL(t, admin, `CREATE TABLE public.by_admin (id int PRIMARY KEY)`)
	// A DDL transaction conflicts with every version it did not see
	// (GUARANTEES.md): replica 2 must hold by_admin's first, or mallory's
	// CREATE TABLE there gets 40001 on a loaded machine.
	if !c.waitForVersion(10 * time.Second) {
		t.Fatal("replica 2 did not apply by_admin's version")
	}
	trusted := c.connectWith(1, func(cfg *pgx.ConnConfig) { cfg.User = "mallory" })
	execSQL(t, trusted, `CREATE TABLE public.by_mallory (id int PRIMARY KEY)`)

	c.converge(10 * time.Second)
	for i := range 2 {
		var refused, replicated, notes int
		if err := c.direct(i).QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_proc WHERE proname = 'esc')
				+ (SELECT count(*) FROM pg_class WHERE relname IN ('sneaky', 'm', 'bypass'))
				+ (SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.owned'::regclass AND attname = 'v'),
			(SELECT count(*) FROM pg_class WHERE relname IN ('by_admin', 'by_mallory', 'owned')),
			(SELECT count(*) FROM notes)`).Scan(&refused, &replicated, &notes); err != nil {
			t.Fatal(err)
		}
		if refused != 0 || replicated != 3 || notes != 2 {
			t.Errorf("replica %d: %d objects of refused DDL, %d of the 3 tables that must exist, %d of mallory's 2 rows",
				i+1, refused, replicated, notes)
		}
	}
}

func assertDDLRefused(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "only from superusers") ||
		!strings.Contains(pgErr.Detail, what) || !strings.Contains(pgErr.Hint, "--trust-ddl-roles") {
		t.Fatalf("%s as a role that is not a superuser: %v, want 42501 naming it, with a hint", what, err)
	}
}
