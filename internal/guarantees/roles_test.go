package guarantees_test

// A role that is not a superuser gets exactly the rights PostgreSQL gives
// it on one server, nothing more on any replica, and no way to make the
// replicas differ without an error (the one-copy guarantee of snapshot
// isolation: every replica applies the same writesets in the same order).
// The other replicas apply writesets and run replicated DDL as a
// superuser, so DDL from such a role is refused (42501) unless the
// replica's agent trusts every role (extension/src/ddlguard.c).

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// One cluster for the role tests (starting it is most of their time);
// replica 2's agent trusts every role with DDL, replica 1's does not.
func TestRolesGetNoMoreThanOnOneServer(t *testing.T) {
	c := roleCluster(t, func(i int) bool { return i == 1 })
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *cluster)
	}{
		{"a role's DDL is refused unless trusted", roleDDLIsRefusedUnlessTrusted},
		{"a role's writes commit where they ran and replicate", roleWritesReplicate},
		{"user triggers do not run on apply", userTriggersDoNotRunOnApply},
		{"DDL after SET ROLE in a pipeline is the role's", pipelinedSetRoleDDLIsTheRoles},
		{"commands on the role itself are refused", commandsOnTheRoleItselfAreRefused},
		{"dropping a shadowing temporary table and the table in one pipeline", pipelinedDropOfAShadowedTable},
		{"a drop of a temporary and a permanent table is refused", dropOfTemporaryAndPermanentIsRefused},
		{"a temporary child of a replicated table is refused", temporaryChildIsRefused},
		{"prepared statements cannot create tables", preparedStatementsCannotCreateTables},
		{"triggers, rules, policies and comments of a temporary table stay local", temporaryTableObjectsStayLocal},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, c) })
		c.awaitDurable(0)
		c.awaitDurable(1)
	}
	c.converge()
}

func assertDDLGuard(t *testing.T, err error, what string) {
	t.Helper()
	e := pgError(err)
	if e == nil || e.Code != pgcode.InsufficientPrivilege || !strings.Contains(e.Message, "only from superusers") ||
		!strings.Contains(e.Detail, what) || !strings.Contains(e.Hint, "tashkent.ddl_trust") {
		t.Fatalf("%s as a role that is not a superuser: %v, want the DDL guard's 42501 naming it, with a hint", what, err)
	}
}

// The DDL guard: a role's DDL is refused (42501), also inside a DO block
// and in a transaction (where a savepoint keeps the rest), on replica 1;
// DDL on temporary objects is allowed. Replica 2 trusts roles: there her
// DDL is replicated, and replica 1 runs it.
func roleDDLIsRefusedUnlessTrusted(t *testing.T, c *cluster) {
	ctx := context.Background()
	m := c.mallory(0)
	for _, refused := range []struct{ sql, what string }{
		{`CREATE FUNCTION public.esc() RETURNS int LANGUAGE plpgsql AS $$
			BEGIN
				IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
					EXECUTE 'ALTER ROLE mallory SUPERUSER';
				END IF;
				RETURN 0;
			END $$`, `CREATE FUNCTION`},
		{`DO $$BEGIN CREATE TABLE public.sneaky (id int PRIMARY KEY); END$$`, `CREATE TABLE`},
		{`ALTER TABLE public.owned ADD COLUMN w int DEFAULT 0`, `ALTER TABLE`},
		{`DROP TABLE public.owned`, `DROP TABLE`},
	} {
		_, err := m.Exec(ctx, refused.sql)
		assertDDLGuard(t, err, refused.what)
	}
	tx := begin(t, m)
	for _, sql := range []string{`INSERT INTO public.notes VALUES (1, 'kept')`, `SAVEPOINT a`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	_, err := tx.Exec(ctx, `CREATE TABLE public.m (id int PRIMARY KEY)`)
	assertDDLGuard(t, err, `CREATE TABLE`)
	for _, sql := range []string{`ROLLBACK TO a`, `INSERT INTO public.notes VALUES (2, 'after the refusal')`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`CREATE TEMP TABLE scratch (n int PRIMARY KEY)`,
		`ALTER TABLE scratch ADD COLUMN m int`,
		`CREATE INDEX ON scratch (m)`,
		`DROP TABLE scratch`,
	} {
		execSQL(t, m, sql)
	}
	c.awaitDurable(1)
	execSQL(t, c.mallory(1), `CREATE TABLE public.by_mallory (id int PRIMARY KEY)`)
	c.converge()
	for i := range 2 {
		if n := c.countOn(i, `SELECT (SELECT count(*) FROM pg_proc WHERE proname = 'esc')
			+ (SELECT count(*) FROM pg_class WHERE relname IN ('sneaky', 'm'))
			+ (SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.owned'::regclass AND attname = 'w')`); n != 0 {
			t.Errorf("replica %d holds %d objects of refused DDL", i+1, n)
		}
		if n := c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = 'by_mallory'`); n != 1 {
			t.Errorf("replica %d lacks the table mallory created on the replica that trusts roles", i+1)
		}
		if n := c.countOn(i, `SELECT count(*) FROM public.notes WHERE id IN (1, 2)`); n != 2 {
			t.Errorf("replica %d holds %d of mallory's 2 rows", i+1, n)
		}
	}
}

// A role's transactions, with a temporary table written beside replicated
// rows, commit where they ran (the session keeps its temporary rows) and
// reach the other replica.
func roleWritesReplicate(t *testing.T, c *cluster) {
	ctx := context.Background()
	m := c.mallory(1)
	execSQL(t, m, `CREATE TEMP TABLE scratch (n int)`)
	for i := 1; i <= 3; i++ {
		tx := begin(t, m)
		for _, sql := range []string{`INSERT INTO scratch VALUES ($1)`, `INSERT INTO public.notes VALUES (100 + $1, 'role')`} {
			if _, err := tx.Exec(ctx, sql, i); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("mallory's commit %d: %v", i, err)
		}
	}
	var scratch int
	if err := m.QueryRow(ctx, `SELECT count(*) FROM scratch`).Scan(&scratch); err != nil || scratch != 3 {
		t.Fatalf("mallory's temporary table after her commits: %d rows, %v; want 3", scratch, err)
	}
	c.converge()
	if n := c.countOn(0, `SELECT count(*) FROM public.notes WHERE id BETWEEN 101 AND 103`); n != 3 {
		t.Fatalf("replica 1 holds %d of mallory's 3 rows", n)
	}
}

// A superuser's ordinary trigger (ENABLE ORIGIN, the default) on a table
// a role writes fires where the role wrote, as that role, and never in the
// other replicas' appliers, which apply the rows it wrote: the log the
// trigger keeps has one row, naming mallory, on both replicas. A role
// cannot make a trigger fire on apply (ENABLE ALWAYS is DDL).
func userTriggersDoNotRunOnApply(t *testing.T, c *cluster) {
	admin := c.Connect(0)
	for _, sql := range []string{
		`CREATE TABLE public.trigger_log (id bigserial PRIMARY KEY, who text, superuser bool)`,
		`GRANT INSERT ON public.trigger_log TO mallory`,
		`GRANT USAGE ON SEQUENCE public.trigger_log_id_seq TO mallory`,
		`CREATE FUNCTION public.log_writer() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO public.trigger_log (who, superuser)
				SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user;
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER log_writer AFTER INSERT ON public.owned FOR EACH ROW EXECUTE FUNCTION public.log_writer()`,
	} {
		execSQL(t, admin, sql)
	}
	c.awaitDurable(1)
	_, err := c.mallory(0).Exec(context.Background(), `ALTER TABLE public.owned ENABLE ALWAYS TRIGGER log_writer`)
	assertDDLGuard(t, err, `ALTER TABLE`)
	execSQL(t, c.mallory(1), `INSERT INTO public.owned VALUES (1, 'through replica 2')`)
	c.converge()
	for i := range 2 {
		if got := c.textOn(i, `SELECT string_agg(who || ':' || superuser, ' ') FROM public.trigger_log`); got != "mallory:false" {
			t.Errorf("replica %d: the trigger's log is %q, want one row written as mallory", i+1, got)
		}
		if n := c.countOn(i, `SELECT count(*) FROM pg_roles WHERE rolname = 'mallory' AND rolsuper`); n != 0 {
			t.Errorf("mallory is a superuser on replica %d", i+1)
		}
	}
}

// A superuser's session that runs SET ROLE mallory and then DDL in one
// extended-protocol pipeline: the DDL is mallory's, judged by the role it
// runs as (current_user), and refused.
func pipelinedSetRoleDDLIsTheRoles(t *testing.T, c *cluster) {
	ctx := context.Background()
	pipeline := c.Connect(0).PgConn().StartPipeline(ctx)
	pipeline.SendQueryParams(`SET ROLE mallory`, nil, nil, nil, nil)
	pipeline.SendQueryParams(`CREATE TABLE public.piped (id int PRIMARY KEY)`, nil, nil, nil, nil)
	pipeline.SendQueryParams(`RESET ROLE`, nil, nil, nil, nil)
	if err := pipeline.Sync(); err != nil {
		t.Fatal(err)
	}
	firstErr := pipelineError(pipeline)
	assertDDLGuard(t, firstErr, "CREATE TABLE")
	c.awaitDurable(1)
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = 'piped'`); n != 0 {
			t.Errorf("replica %d has public.piped", i+1)
		}
	}
}

// PostgreSQL fires no event trigger for ALTER ROLE or REASSIGN OWNED: the
// guard judges them where it decides to replicate them. A role's commands
// on itself are refused; a superuser's ALTER ROLE is replicated. (On the
// other replicas CURRENT_USER is the applier's superuser.)
func commandsOnTheRoleItselfAreRefused(t *testing.T, c *cluster) {
	const passwords = `SELECT count(*) FROM pg_authid WHERE rolsuper AND rolpassword IS NOT NULL`
	before := []int{c.countOn(0, passwords), c.countOn(1, passwords)}
	m := c.mallory(0)
	for _, sql := range []string{
		`ALTER ROLE CURRENT_USER SET statement_timeout = '4321'`,
		`ALTER ROLE CURRENT_USER PASSWORD 'chosen by mallory'`,
		`REASSIGN OWNED BY CURRENT_USER TO mallory`,
	} {
		_, err := m.Exec(context.Background(), sql)
		if e := pgError(err); e == nil || e.Code != pgcode.InsufficientPrivilege {
			t.Errorf("%s as mallory: %v, want 42501", sql, err)
		}
	}
	execSQL(t, c.Connect(0), `ALTER ROLE mallory SET work_mem = '5MB'`)
	c.converge()
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
			WHERE r.rolsuper AND 'statement_timeout=4321' = ANY (s.setconfig)`); n != 0 {
			t.Errorf("replica %d: a superuser got mallory's statement_timeout", i+1)
		}
		if n := c.countOn(i, passwords); n != before[i] {
			t.Errorf("replica %d: a superuser got mallory's password", i+1)
		}
		if n := c.countOn(i, `SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
			WHERE r.rolname = 'mallory' AND 'work_mem=5MB' = ANY (s.setconfig)`); n != 1 {
			t.Errorf("replica %d: the superuser's ALTER ROLE mallory was not replicated", i+1)
		}
	}
}

// A temporary table named like a permanent one shadows it. In one
// pipeline, DROP TABLE owned drops the temporary table (local), and a
// second DROP TABLE owned means the permanent one: DDL of mallory's,
// refused, on every replica alike.
func pipelinedDropOfAShadowedTable(t *testing.T, c *cluster) {
	m := c.mallory(0)
	execSQL(t, m, `CREATE TEMP TABLE owned (id int)`)
	batch := &pgx.Batch{}
	batch.Queue(`DROP TABLE owned`)
	batch.Queue(`DROP TABLE owned`)
	err := m.SendBatch(context.Background(), batch).Close()
	assertDDLGuard(t, err, "DROP TABLE")
	c.awaitDurable(1)
	const owned = `SELECT count(*) FROM pg_class WHERE relname = 'owned' AND relpersistence = 'p'`
	for i := range 2 {
		if n := c.countOn(i, owned); n != 1 {
			t.Errorf("replica %d: %d tables public.owned, want 1", i+1, n)
		}
	}
}

// DROP TABLE naming a temporary table and a permanent one is refused
// (0A000), from a superuser too: neither running it here alone nor
// everywhere is right. Dropped apart, each goes its way.
func dropOfTemporaryAndPermanentIsRefused(t *testing.T, c *cluster) {
	ctx := context.Background()
	for _, conn := range []*pgx.Conn{c.mallory(0), c.Connect(0)} {
		execSQL(t, conn, `CREATE TEMP TABLE tmp (id int)`)
		_, err := conn.Exec(ctx, `DROP TABLE IF EXISTS tmp, public.owned`)
		checkTempDDLOutcome(t, "DROP TABLE tmp, public.owned", "refused", err)
		execSQL(t, conn, `DROP TABLE tmp`)
	}
	admin := c.Connect(0)
	execSQL(t, admin, `CREATE TABLE public.dropped (id int PRIMARY KEY)`)
	execSQL(t, admin, `DROP TABLE public.dropped`)
	c.converge()
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname IN ('owned', 'dropped') AND relpersistence = 'p'`); n != 1 {
			t.Errorf("replica %d: %d of public.owned and public.dropped, want owned only", i+1, n)
		}
	}
}

// A temporary table that inherits from a replicated one would let writes
// to the parent reach the temporary rows and be replicated as the
// parent's: refused (0A000), created so or attached later; a temporary
// table LIKE a replicated one is fine and stays local.
func temporaryChildIsRefused(t *testing.T, c *cluster) {
	ctx := context.Background()
	m := c.mallory(0)
	for _, sql := range []string{
		`CREATE TEMP TABLE kid () INHERITS (public.owned)`,
		`BEGIN; CREATE TEMP TABLE kid2 (id int NOT NULL, v text); ALTER TABLE kid2 INHERIT public.owned; COMMIT`,
	} {
		_, err := m.Exec(ctx, sql)
		if pgcode.Of(err) != pgcode.FeatureNotSupported || !strings.Contains(err.Error(), "inherits from a permanent") {
			t.Errorf("%s as mallory: %v, want 0A000", sql, err)
		}
		execSQL(t, m, `ROLLBACK`)
	}
	execSQL(t, m, `CREATE TEMP TABLE kid3 (LIKE public.owned)`)
	execSQL(t, m, `INSERT INTO kid3 VALUES (50, 'only in my temp table')`)
	execSQL(t, m, `UPDATE public.owned SET v = 'touched' WHERE id = 50`)
	c.converge()
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM public.owned WHERE id = 50`); n != 0 {
			t.Errorf("replica %d: public.owned holds the row of mallory's temporary table", i+1)
		}
	}
}

// PREPARE ... SELECT INTO and CREATE TABLE AS EXECUTE would create a table
// whose text names a prepared statement of one session: refused (0A000),
// in both protocols, for roles and superusers.
func preparedStatementsCannotCreateTables(t *testing.T, c *cluster) {
	ctx := context.Background()
	for _, conn := range []*pgx.Conn{c.mallory(0), c.Connect(0)} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
			_, err := conn.Exec(ctx, `PREPARE q AS SELECT 1 AS id INTO public.pinto`, mode)
			if pgcode.Of(err) != pgcode.FeatureNotSupported || !strings.Contains(err.Error(), "SELECT INTO in a prepared statement") {
				t.Errorf("PREPARE ... SELECT INTO (%v): %v, want 0A000", mode, err)
			}
		}
	}
	admin := c.Connect(0)
	execSQL(t, admin, `PREPARE qq AS SELECT 1 AS id`)
	if _, err := admin.Exec(ctx, `CREATE TABLE public.ctae AS EXECUTE qq`); pgcode.Of(err) != pgcode.FeatureNotSupported {
		t.Fatalf("CREATE TABLE AS EXECUTE: %v, want 0A000", err)
	}
	execSQL(t, c.mallory(0), `PREPARE r AS SELECT count(*) FROM public.notes`)
	c.converge()
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname IN ('pinto', 'ctae')`); n != 0 {
			t.Errorf("replica %d has a table a prepared statement created", i+1)
		}
	}
}

// CREATE TRIGGER, RULE and POLICY on a temporary table, qualified with
// pg_temp or not, and COMMENT ON it or its columns, stay on this replica;
// the other replica keeps applying.
func temporaryTableObjectsStayLocal(t *testing.T, c *cluster) {
	m := c.mallory(0)
	for _, sql := range []string{
		`CREATE TEMP TABLE scratch (id int PRIMARY KEY, v text)`,
		`CREATE TRIGGER keep BEFORE UPDATE ON pg_temp.scratch
			FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`,
		`CREATE RULE quiet AS ON DELETE TO pg_temp.scratch DO INSTEAD NOTHING`,
		`CREATE POLICY mine ON pg_temp.scratch USING (true)`,
		`ALTER POLICY mine ON pg_temp.scratch USING (id > 0)`,
		`COMMENT ON TABLE pg_temp.scratch IS 'mine'`,
		`COMMENT ON COLUMN scratch.v IS 'mine too'`,
		`INSERT INTO public.notes VALUES (200, 'after the temporary DDL')`,
	} {
		execSQL(t, m, sql)
	}
	c.converge()
	if n := c.countOn(1, `SELECT count(*) FROM public.notes WHERE id = 200`); n != 1 {
		t.Errorf("replica 2 lacks mallory's row: it stopped applying")
	}
}
