package guarantees_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// tempDDLCase is one kind of DDL on temporary objects: setup runs first in
// a fresh session, then sql; %[1]s in either is the protocol's name, so
// that the runs do not collide.
type tempDDLCase struct {
	name  string
	setup []string
	sql   string
	// want is "local" (runs here only), "refused" (tashkent's 0A000),
	// "fails" (PostgreSQL's own error) or "replicated".
	want string
	// roleWant is want for a role that is not a superuser, when it differs.
	roleWant string
}

// tempDDLCases are the DDL statement kinds of PostgreSQL 15 that can act
// on temporary objects. "local" ones must not reach the other replicas
// (which have no such object: their appliers would stop on it for good);
// "refused" ones make a permanent object out of, or depending on, a
// temporary one, or act on both kinds at once.
var tempDDLCases = []tempDDLCase{
	{"statistics qualified", []string{tmpTable}, "CREATE STATISTICS pg_temp.tmpo_s_%[1]s ON a, b FROM pg_temp.tmpo_t", "local", ""},
	{"statistics unqualified", []string{tmpTable}, "CREATE STATISTICS tmpo_s_%[1]s ON a, b FROM tmpo_t", "local", ""},
	{"alter statistics", []string{tmpTable, tmpStats}, "ALTER STATISTICS tmpo_s_%[1]s SET STATISTICS 10", "local", ""},
	{"comment on statistics", []string{tmpTable, tmpStats}, "COMMENT ON STATISTICS tmpo_s_%[1]s IS 'x'", "local", ""},
	{"drop statistics", []string{tmpTable, tmpStats}, "DROP STATISTICS tmpo_s_%[1]s", "local", ""},
	{"drop of a temporary table with statistics", []string{tmpTable, tmpStats}, "DROP TABLE tmpo_t", "local", ""},
	{"drop statistics qualified", []string{tmpTable, "CREATE STATISTICS pg_temp.tmpo_s ON a, b FROM tmpo_t"}, "DROP STATISTICS pg_temp.tmpo_s", "local", ""},
	{"composite type", nil, "CREATE TYPE pg_temp.tmpo_ty AS (a int)", "local", ""},
	{"alter type add attribute", []string{tmpType}, "ALTER TYPE pg_temp.tmpo_ty ADD ATTRIBUTE b int", "local", ""},
	{"alter type unqualified", []string{tmpType}, "ALTER TYPE tmpo_ty ADD ATTRIBUTE c int", "local", ""},
	{"rename type", []string{tmpType}, "ALTER TYPE pg_temp.tmpo_ty RENAME TO tmpo_ty2", "local", ""},
	{"type owner", []string{tmpType}, "ALTER TYPE tmpo_ty OWNER TO mallory", "local", ""},
	{"grant on type", []string{tmpType}, "GRANT USAGE ON TYPE pg_temp.tmpo_ty TO mallory", "local", ""},
	{"comment on type", []string{tmpType}, "COMMENT ON TYPE tmpo_ty IS 'x'", "local", ""},
	{"drop type", []string{tmpType}, "DROP TYPE pg_temp.tmpo_ty", "local", ""},
	{"shell type", nil, "CREATE TYPE pg_temp.tmpo_shell", "local", "fails"},
	{"enum", []string{"CREATE TYPE pg_temp.tmpo_en AS ENUM ('a')"}, "ALTER TYPE pg_temp.tmpo_en ADD VALUE 'b'", "local", ""},
	{"range", nil, "CREATE TYPE pg_temp.tmpo_rg AS RANGE (subtype = int4)", "local", ""},
	{"domain", nil, "CREATE DOMAIN pg_temp.tmpo_dom AS int CHECK (VALUE > 0)", "local", ""},
	{"alter domain", []string{tmpDomain}, "ALTER DOMAIN tmpo_dom SET NOT NULL", "local", ""},
	{"comment on domain constraint", []string{tmpDomain}, "COMMENT ON CONSTRAINT positive ON DOMAIN pg_temp.tmpo_dom IS 'x'", "local", ""},
	{"function", nil, "CREATE FUNCTION pg_temp.tmpo_f() RETURNS int LANGUAGE sql AS 'SELECT 1'", "local", ""},
	{"alter function", []string{tmpFunction}, "ALTER FUNCTION pg_temp.tmpo_f() IMMUTABLE", "local", ""},
	{"comment on function", []string{tmpFunction}, "COMMENT ON FUNCTION pg_temp.tmpo_f() IS 'x'", "local", ""},
	{"grant on function", []string{tmpFunction}, "GRANT EXECUTE ON FUNCTION pg_temp.tmpo_f() TO mallory", "local", ""},
	{"drop function", []string{tmpFunction}, "DROP FUNCTION pg_temp.tmpo_f()", "local", ""},
	{"operator", nil, "CREATE OPERATOR pg_temp.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq)", "local", ""},
	{"collation", nil, `CREATE COLLATION pg_temp.tmpo_coll FROM "C"`, "local", ""},
	{"aggregate", nil, "CREATE AGGREGATE pg_temp.tmpo_agg (int) (SFUNC = int4pl, STYPE = int)", "local", ""},
	{"text search configuration", nil, "CREATE TEXT SEARCH CONFIGURATION pg_temp.tmpo_cfg (COPY = english)", "local", ""},
	{"default privileges in pg_temp", nil, "ALTER DEFAULT PRIVILEGES IN SCHEMA pg_temp GRANT SELECT ON TABLES TO mallory", "fails", ""},
	{"temp sequence", []string{"CREATE TEMP SEQUENCE tmpo_seq"}, "ALTER SEQUENCE tmpo_seq RESTART WITH 5", "local", ""},
	{"temp view", nil, "CREATE TEMP VIEW tmpo_v AS SELECT 1 AS one", "local", ""},
	{"view temporary by its table", []string{tmpTable}, "CREATE VIEW tmpo_iv_%[1]s AS SELECT * FROM tmpo_t", "local", ""},
	{"temp table as", nil, "CREATE TEMP TABLE tmpo_t2 AS SELECT * FROM public.notes", "local", ""},
	{"index", []string{tmpTable}, "CREATE INDEX ON tmpo_t (a)", "local", ""},
	{"rename table", []string{tmpTable}, "ALTER TABLE tmpo_t RENAME TO tmpo_t3", "local", ""},
	{"grant on table", []string{tmpTable}, "GRANT SELECT ON tmpo_t TO mallory", "local", ""},
	{"table owner", []string{tmpTable}, "ALTER TABLE pg_temp.tmpo_t OWNER TO mallory", "local", ""},
	{"comment on constraint", []string{tmpTable, "ALTER TABLE tmpo_t ADD CONSTRAINT tmpo_c CHECK (a > 0)"}, "COMMENT ON CONSTRAINT tmpo_c ON tmpo_t IS 'x'", "local", ""},
	{"search_path pg_temp first", []string{"SET search_path = pg_temp, public"}, "CREATE TABLE tmpo_sp (id int)", "local", ""},
	{"drop temporary ones", []string{tmpTable, "CREATE TEMP TABLE tmpo_t2 (id int)"}, "DROP TABLE tmpo_t, pg_temp.tmpo_t2", "local", ""},
	{"reindex", []string{tmpTable, "CREATE INDEX ON tmpo_t (a)"}, "REINDEX TABLE tmpo_t", "local", ""},
	{"table as from temporary", []string{tmpTable}, "CREATE TABLE tmpo_p_%[1]s AS SELECT * FROM tmpo_t", "refused", ""},
	{"select into from temporary", []string{tmpTable}, "SELECT * INTO tmpo_p_%[1]s FROM tmpo_t", "refused", ""},
	{"table like temporary", []string{tmpTable}, "CREATE TABLE tmpo_p_%[1]s (LIKE tmpo_t)", "refused", ""},
	{"table of temporary type", []string{tmpType}, "CREATE TABLE tmpo_p_%[1]s (id int PRIMARY KEY, x pg_temp.tmpo_ty)", "refused", ""},
	{"table of temporary type unqualified", []string{tmpType}, "CREATE TABLE tmpo_p_%[1]s (id int PRIMARY KEY, x tmpo_ty)", "refused", ""},
	{"cast of temporary type", []string{tmpType}, "CREATE CAST (pg_temp.tmpo_ty AS text) WITH INOUT", "refused", ""},
	{"drop temporary and permanent", []string{tmpTable}, "DROP TABLE tmpo_t, public.notes", "refused", ""},
	{"drop temporary and permanent types", []string{tmpType, "CREATE TYPE public.tmpo_pty_%[1]s AS (a int)"}, "DROP TYPE tmpo_ty, public.tmpo_pty_%[1]s", "refused", ""},
	{"function body naming a temporary table", []string{tmpTable},
		"CREATE FUNCTION public.tmpo_g_%[1]s() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM tmpo_t; END", "refused", ""},
	{"materialized view", []string{tmpTable}, "CREATE MATERIALIZED VIEW tmpo_mv_%[1]s AS SELECT * FROM tmpo_t", "fails", ""},
	{"attach temporary partition", []string{tmpTable, "CREATE TABLE IF NOT EXISTS tmpo_parted_%[1]s (a int, b int) PARTITION BY LIST (a)", ""},
		"ALTER TABLE tmpo_parted_%[1]s ATTACH PARTITION tmpo_t FOR VALUES IN (1)", "fails", ""},
	// Replicated: its body is a string, which the other replicas do not
	// check (check_function_bodies off in the applier).
	{"function with a body naming a temporary table", []string{tmpTable},
		"CREATE FUNCTION public.tmpo_g2_%[1]s() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM tmpo_t'", "replicated", ""},
	{"trigger calling a temporary function", []string{tmpFunction, "CREATE TABLE IF NOT EXISTS tmpo_trg_%[1]s (id int PRIMARY KEY)"},
		"CREATE TRIGGER tmpo_trg AFTER INSERT ON tmpo_trg_%[1]s EXECUTE FUNCTION pg_temp.tmpo_f()", "fails", ""},
	{"explain analyze table as from temporary", []string{tmpTable}, "EXPLAIN ANALYZE CREATE TABLE tmpo_p_%[1]s AS SELECT * FROM tmpo_t", "refused", ""},
	{"explain analyze temp table as", nil, "EXPLAIN ANALYZE CREATE TEMP TABLE tmpo_e AS SELECT 1 AS one", "local", ""},
	{"default from a temporary sequence", []string{"CREATE TEMP SEQUENCE tmpo_seq"},
		"CREATE TABLE tmpo_p_%[1]s (id int PRIMARY KEY DEFAULT nextval('tmpo_seq'))", "refused", ""},
	// On the other replicas the name means the permanent table.
	{"drop of a shadowing temporary table and a permanent one", []string{
		"CREATE TABLE IF NOT EXISTS public.tmpo_shadow_%[1]s (id int PRIMARY KEY)",
		"CREATE TABLE IF NOT EXISTS public.tmpo_victim_%[1]s (id int PRIMARY KEY)",
		"CREATE TEMP TABLE tmpo_shadow_%[1]s (id int)"},
		"DROP TABLE IF EXISTS tmpo_shadow_%[1]s, public.tmpo_victim_%[1]s", "refused", ""},
	{"foreign key to permanent", []string{tmpTable}, "ALTER TABLE tmpo_t ADD FOREIGN KEY (a) REFERENCES public.notes (id)", "fails", ""},
	{"security label", []string{tmpTable}, "SECURITY LABEL ON TABLE tmpo_t IS 'x'", "fails", ""},
}

const (
	tmpTable    = "CREATE TEMP TABLE tmpo_t (a int, b int)"
	tmpStats    = "CREATE STATISTICS tmpo_s_%[1]s ON a, b FROM tmpo_t"
	tmpType     = "CREATE TYPE pg_temp.tmpo_ty AS (a int)"
	tmpDomain   = "CREATE DOMAIN pg_temp.tmpo_dom AS int CONSTRAINT positive CHECK (VALUE > 0)"
	tmpFunction = "CREATE FUNCTION pg_temp.tmpo_f() RETURNS int LANGUAGE sql AS 'SELECT 1'"
)

// Every kind, as a superuser in the simple and the extended protocol and
// as a role that is not one, on one cluster: after each, a replicated
// write must reach the other replica (its applier did not stop on it), and
// at the end the other replica holds the permanent objects this one holds,
// and none of the temporary ones.
func TestDDLOnTemporaryObjectsStaysLocalOrIsRefused(t *testing.T) {
	c := roleCluster(t, nil)
	modes := []struct {
		name string
		exec func(*pgx.Conn, string) error
		user string
	}{{"simple", simple, "postgres"}, {"extended", extended, "postgres"}, {"mallory", extended, "mallory"}}
	writer := c.Connect(0)
	row := 1000
	for _, mode := range modes {
		for _, tc := range tempDDLCases {
			if mode.user != "postgres" && (tc.want == "refused" || tc.want == "replicated" || setsUpPermanentObjects(tc)) {
				continue // the DDL guard refuses a role's replicated DDL (42501): TestTheDDLGuard
			}
			conn := c.connectAs(0, mode.user, nil)
			for _, sql := range tc.setup {
				if err := mode.exec(conn, forMode(sql, mode.name)); err != nil {
					t.Fatalf("%s / %s: setup %s: %v", mode.name, tc.name, sql, err)
				}
			}
			want := tc.want
			if mode.user != "postgres" && tc.roleWant != "" {
				want = tc.roleWant
			}
			checkTempDDLOutcome(t, mode.name+" / "+tc.name, want, mode.exec(conn, forMode(tc.sql, mode.name)))
			// The session's temporary objects go when its backend exits:
			// the next case's objects have the same names.
			pid := conn.PgConn().PID()
			conn.Close(context.Background())
			awaitBackendGone(t, c, 0, pid)
			row++
			execSQL(t, writer, `INSERT INTO public.notes VALUES ($1, $2)`, row, mode.name+" / "+tc.name)
			c.awaitDurable(1)
		}
	}
	c.converge()
	permanent := func(i int, where string) string {
		return c.textOn(i, `SELECT coalesce(string_agg(name, ' ' ORDER BY name), '') FROM (
			SELECT nspname || '.' || relname FROM pg_class JOIN pg_namespace AS n ON n.oid = relnamespace WHERE relname LIKE 'tmpo%'
			UNION ALL SELECT nspname || '.' || typname FROM pg_type JOIN pg_namespace AS n ON n.oid = typnamespace
				WHERE typname LIKE 'tmpo%' OR typname LIKE '\_tmpo%'
			UNION ALL SELECT nspname || '.' || proname FROM pg_proc JOIN pg_namespace AS n ON n.oid = pronamespace WHERE proname LIKE 'tmpo%'
			UNION ALL SELECT nspname || '.' || stxname FROM pg_statistic_ext JOIN pg_namespace AS n ON n.oid = stxnamespace WHERE stxname LIKE 'tmpo%'
			UNION ALL SELECT nspname || '.' || oprname FROM pg_operator JOIN pg_namespace AS n ON n.oid = oprnamespace WHERE oprname = '==='
		) AS o(name) WHERE `+where)
	}
	here, there := permanent(0, `name NOT LIKE 'pg\_temp%'`), permanent(1, "true")
	if here != there || !strings.Contains(there, "public.tmpo_g2_simple") || !strings.Contains(there, "public.tmpo_shadow_simple") {
		t.Errorf("the other replica has the objects %q, want the permanent ones of this replica, %q", there, here)
	}
}

// setsUpPermanentObjects says whether a case's setup creates permanent
// objects (DDL a role that is not a superuser may not run).
func setsUpPermanentObjects(tc tempDDLCase) bool {
	for _, sql := range tc.setup {
		if strings.HasPrefix(sql, "CREATE TABLE IF NOT EXISTS") || strings.Contains(sql, "public.") {
			return true
		}
	}
	return false
}

func checkTempDDLOutcome(t *testing.T, name, want string, err error) {
	t.Helper()
	pgErr := pgError(err)
	switch want {
	case "local", "replicated":
		if err != nil {
			t.Errorf("%s: %v, want it to run", name, err)
		}
	case "refused":
		if pgErr == nil || pgErr.Code != pgcode.FeatureNotSupported || !strings.Contains(pgErr.Message, "tashkent") || pgErr.Hint == "" {
			t.Errorf("%s: %v, want tashkent's 0A000 with a hint", name, err)
		}
	case "fails":
		if pgErr == nil {
			t.Errorf("%s: %v, want PostgreSQL's error", name, err)
		}
	}
}

// DDL that names a temporary table without a schema stays local, like the
// table: the other replicas have no such table, and the name may even mean
// one of their permanent tables there. After the temporary table is
// dropped, the name means the permanent table again, and DDL on it is
// replicated.
func TestDDLOnAnUnqualifiedTemporaryTableStaysLocal(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	modes := map[string]func(*pgx.Conn, string) error{"simple": simple, "extended": extended}
	for name, run := range modes {
		conn := c.Connect(0)
		for _, sql := range []string{
			"CREATE TABLE shadowed_%[1]s (id int PRIMARY KEY, v int)",
			"INSERT INTO shadowed_%[1]s VALUES (1, 1)",
			"CREATE TEMP TABLE tmp_%[1]s (id int PRIMARY KEY, v int)",
			"CREATE INDEX tmp_v_%[1]s ON tmp_%[1]s (v)",
			"ALTER TABLE tmp_%[1]s ADD COLUMN w int",
			"CREATE TEMPORARY TABLE shadowed_%[1]s (id int PRIMARY KEY)", // now the name means the temporary table
			"ALTER TABLE shadowed_%[1]s ADD COLUMN only_here int",
			"DROP TABLE shadowed_%[1]s",                            // the temporary one
			"ALTER TABLE shadowed_%[1]s ADD COLUMN everywhere int", // the permanent one again: replicated
			"BEGIN",
			"CREATE TEMP TABLE tmp2_%[1]s (id int) ON COMMIT DROP",
			"CREATE INDEX ON tmp2_%[1]s (id)",
			"COMMIT",
			"DROP INDEX tmp_v_%[1]s",
			"DROP TABLE tmp_%[1]s",
			"INSERT INTO shadowed_%[1]s VALUES (2, 2, 2)",
		} {
			sql = forMode(sql, name)
			if err := run(conn, sql); err != nil {
				t.Fatalf("%s: %s: %v", name, sql, err)
			}
		}
	}
	// In one pipeline, a temporary table and DDL on it by a name without
	// a schema: each statement is judged by the objects it touched.
	conn := c.Connect(0)
	batch := &pgx.Batch{}
	batch.Queue(`CREATE TEMP TABLE piped (a int)`)
	batch.Queue(`CREATE INDEX ON piped (a)`)
	batch.Queue(`ALTER TABLE piped ADD COLUMN b int`)
	if err := conn.SendBatch(context.Background(), batch).Close(); err != nil {
		t.Fatalf("a pipeline of DDL on its own temporary table: %v", err)
	}
	c.converge()
	for name := range modes {
		q := "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'shadowed_" + name + "'"
		if columns := c.countOn(1, q); columns != 3 {
			t.Fatalf("%s: the other replica's shadowed table has %d columns, want 3 (id, v, everywhere)", name, columns)
		}
	}
	if n := c.countOn(1, `SELECT count(*) FROM pg_class WHERE relname LIKE 'tmp%' OR relname LIKE 'piped%'`); n != 0 {
		t.Errorf("the other replica has %d of the temporary relations", n)
	}
}
