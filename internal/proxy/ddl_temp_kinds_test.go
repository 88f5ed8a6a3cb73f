package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/replica"
)

// tempDDLCase is one kind of DDL on temporary objects (review h35): setup
// runs first in a fresh session, then sql; %[1]s in either is the
// protocol's name, so that the simple and extended runs do not collide.
type tempDDLCase struct {
	name  string
	setup []string
	sql   string
	want  string // "local": runs here only; "refused": 0A000; "fails": PostgreSQL's own error; "replicated"
	// roleWant is want for a role that is not a superuser, when it differs
	// ("guard": the DDL guard's 42501).
	roleWant string
}

// tempDDLCases are the DDL statement kinds of PostgreSQL 15 that can act
// on temporary objects. Before h35, every "local" one whose object is not
// a temporary table (statistics, types, domains, functions, operators,
// GRANT, ...) was replicated, and the other replica's applier stopped on
// it for good ("type pg_temp.h35_ty does not exist"); the "refused" ones
// made a permanent object out of a temporary one and stopped it too.
var tempDDLCases = []tempDDLCase{
	{"statistics qualified", []string{tmpTable}, "CREATE STATISTICS pg_temp.h35_s_%[1]s ON a, b FROM pg_temp.h35_t", "local", ""},
	{"statistics unqualified", []string{tmpTable}, "CREATE STATISTICS h35_s_%[1]s ON a, b FROM h35_t", "local", ""},
	{"alter statistics", []string{tmpTable, tmpStats}, "ALTER STATISTICS h35_s_%[1]s SET STATISTICS 10", "local", ""},
	{"comment on statistics", []string{tmpTable, tmpStats}, "COMMENT ON STATISTICS h35_s_%[1]s IS 'x'", "local", ""},
	// The DDL guard cannot tell a dropped statistics object's table (it is
	// gone from the catalog by then), nor the objects of a GRANT (event
	// triggers do not report them): it refuses those from roles (42501).
	{"drop statistics", []string{tmpTable, tmpStats}, "DROP STATISTICS h35_s_%[1]s", "local", "guard"},
	{"drop of a temporary table with statistics", []string{tmpTable, tmpStats}, "DROP TABLE h35_t", "local", "guard"},
	{"drop statistics qualified", []string{tmpTable, "CREATE STATISTICS pg_temp.h35_s ON a, b FROM h35_t"}, "DROP STATISTICS pg_temp.h35_s", "local", ""},
	{"composite type", nil, "CREATE TYPE pg_temp.h35_ty AS (a int)", "local", ""},
	{"alter type add attribute", []string{tmpType}, "ALTER TYPE pg_temp.h35_ty ADD ATTRIBUTE b int", "local", ""},
	{"alter type unqualified", []string{tmpType}, "ALTER TYPE h35_ty ADD ATTRIBUTE c int", "local", ""},
	{"rename type", []string{tmpType}, "ALTER TYPE pg_temp.h35_ty RENAME TO h35_ty2", "local", ""},
	{"type owner", []string{tmpType}, "ALTER TYPE h35_ty OWNER TO mallory", "local", ""},
	{"grant on type", []string{tmpType}, "GRANT USAGE ON TYPE pg_temp.h35_ty TO mallory", "local", "guard"},
	{"comment on type", []string{tmpType}, "COMMENT ON TYPE h35_ty IS 'x'", "local", ""},
	{"drop type", []string{tmpType}, "DROP TYPE pg_temp.h35_ty", "local", ""},
	{"shell type", nil, "CREATE TYPE pg_temp.h35_shell", "local", "fails"},
	{"enum", []string{"CREATE TYPE pg_temp.h35_en AS ENUM ('a')"}, "ALTER TYPE pg_temp.h35_en ADD VALUE 'b'", "local", ""},
	{"range", nil, "CREATE TYPE pg_temp.h35_rg AS RANGE (subtype = int4)", "local", ""},
	{"domain", nil, "CREATE DOMAIN pg_temp.h35_dom AS int CHECK (VALUE > 0)", "local", ""},
	{"alter domain", []string{tmpDomain}, "ALTER DOMAIN h35_dom SET NOT NULL", "local", ""},
	{"comment on domain constraint", []string{tmpDomain}, "COMMENT ON CONSTRAINT positive ON DOMAIN pg_temp.h35_dom IS 'x'", "local", ""},
	{"function", nil, "CREATE FUNCTION pg_temp.h35_f() RETURNS int LANGUAGE sql AS 'SELECT 1'", "local", ""},
	{"alter function", []string{tmpFunction}, "ALTER FUNCTION pg_temp.h35_f() IMMUTABLE", "local", ""},
	{"comment on function", []string{tmpFunction}, "COMMENT ON FUNCTION pg_temp.h35_f() IS 'x'", "local", ""},
	{"grant on function", []string{tmpFunction}, "GRANT EXECUTE ON FUNCTION pg_temp.h35_f() TO mallory", "local", "guard"},
	{"drop function", []string{tmpFunction}, "DROP FUNCTION pg_temp.h35_f()", "local", ""},
	{"operator", nil, "CREATE OPERATOR pg_temp.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq)", "local", ""},
	{"collation", nil, `CREATE COLLATION pg_temp.h35_coll FROM "C"`, "local", ""},
	{"aggregate", nil, "CREATE AGGREGATE pg_temp.h35_agg (int) (SFUNC = int4pl, STYPE = int)", "local", ""},
	{"text search configuration", nil, "CREATE TEXT SEARCH CONFIGURATION pg_temp.h35_cfg (COPY = english)", "local", ""},
	{"default privileges in pg_temp", nil, "ALTER DEFAULT PRIVILEGES IN SCHEMA pg_temp GRANT SELECT ON TABLES TO mallory", "fails", ""},
	{"temp sequence", []string{"CREATE TEMP SEQUENCE h35_seq"}, "ALTER SEQUENCE h35_seq RESTART WITH 5", "local", ""},
	{"temp view", nil, "CREATE TEMP VIEW h35_v AS SELECT 1 AS one", "local", ""},
	{"view temporary by its table", []string{tmpTable}, "CREATE VIEW h35_iv_%[1]s AS SELECT * FROM h35_t", "local", ""},
	{"temp table as", nil, "CREATE TEMP TABLE h35_t2 AS SELECT * FROM public.notes", "local", ""},
	{"index", []string{tmpTable}, "CREATE INDEX ON h35_t (a)", "local", ""},
	{"rename table", []string{tmpTable}, "ALTER TABLE h35_t RENAME TO h35_t3", "local", ""},
	{"grant on table", []string{tmpTable}, "GRANT SELECT ON h35_t TO mallory", "local", "guard"},
	{"table owner", []string{tmpTable}, "ALTER TABLE pg_temp.h35_t OWNER TO mallory", "local", ""},
	{"comment on constraint", []string{tmpTable, "ALTER TABLE h35_t ADD CONSTRAINT h35_c CHECK (a > 0)"}, "COMMENT ON CONSTRAINT h35_c ON h35_t IS 'x'", "local", ""},
	{"search_path pg_temp first", []string{"SET search_path = pg_temp, public"}, "CREATE TABLE h35_sp (id int)", "local", ""},
	{"drop temporary ones", []string{tmpTable, "CREATE TEMP TABLE h35_t2 (id int)"}, "DROP TABLE h35_t, pg_temp.h35_t2", "local", ""},
	{"reindex", []string{tmpTable, "CREATE INDEX ON h35_t (a)"}, "REINDEX TABLE h35_t", "local", ""},
	{"table as from temporary", []string{tmpTable}, "CREATE TABLE h35_p_%[1]s AS SELECT * FROM h35_t", "refused", ""},
	{"select into from temporary", []string{tmpTable}, "SELECT * INTO h35_p_%[1]s FROM h35_t", "refused", ""},
	{"table like temporary", []string{tmpTable}, "CREATE TABLE h35_p_%[1]s (LIKE h35_t)", "refused", ""},
	{"table of temporary type", []string{tmpType}, "CREATE TABLE h35_p_%[1]s (id int PRIMARY KEY, x pg_temp.h35_ty)", "refused", ""},
	{"table of temporary type unqualified", []string{tmpType}, "CREATE TABLE h35_p_%[1]s (id int PRIMARY KEY, x h35_ty)", "refused", ""},
	{"cast of temporary type", []string{tmpType}, "CREATE CAST (pg_temp.h35_ty AS text) WITH INOUT", "refused", ""},
	{"drop temporary and permanent", []string{tmpTable}, "DROP TABLE h35_t, public.notes", "refused", ""},
	{"drop temporary and permanent types", []string{tmpType, "CREATE TYPE public.h35_pty_%[1]s AS (a int)"}, "DROP TYPE h35_ty, public.h35_pty_%[1]s", "refused", ""},
	{"function body naming a temporary table", []string{tmpTable},
		"CREATE FUNCTION public.h35_g_%[1]s() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM h35_t; END", "refused", ""},
	{"materialized view", []string{tmpTable}, "CREATE MATERIALIZED VIEW h35_mv_%[1]s AS SELECT * FROM h35_t", "refused", ""},
	{"attach temporary partition", []string{tmpTable, "CREATE TABLE IF NOT EXISTS h35_parted_%[1]s (a int, b int) PARTITION BY LIST (a)", ""},
		"ALTER TABLE h35_parted_%[1]s ATTACH PARTITION h35_t FOR VALUES IN (1)", "refused", ""},
	// Replicated (its body is a string), and the other replicas no longer
	// check the body (replica/apply.go, ddlPrologue): before, they failed on
	// it for good ("relation h35_t does not exist").
	{"function with a body naming a temporary table", []string{tmpTable},
		"CREATE FUNCTION public.h35_g2_%[1]s() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM h35_t'", "replicated", ""},
	{"trigger calling a temporary function", []string{tmpFunction, "CREATE TABLE IF NOT EXISTS h35_trg_%[1]s (id int PRIMARY KEY)"},
		"CREATE TRIGGER h35_trg AFTER INSERT ON h35_trg_%[1]s EXECUTE FUNCTION pg_temp.h35_f()", "refused", ""},
	{"explain analyze table as from temporary", []string{tmpTable}, "EXPLAIN ANALYZE CREATE TABLE h35_p_%[1]s AS SELECT * FROM h35_t", "refused", ""},
	{"explain analyze temp table as", nil, "EXPLAIN ANALYZE CREATE TEMP TABLE h35_e AS SELECT 1 AS one", "local", ""},
	{"default from a temporary sequence", []string{"CREATE TEMP SEQUENCE h35_seq"},
		"CREATE TABLE h35_p_%[1]s (id int PRIMARY KEY DEFAULT nextval('h35_seq'))", "refused", ""},
	// Replicated before h35 (IF EXISTS let the other replicas run it), where
	// the name means the permanent table, which they dropped.
	{"drop of a shadowing temporary table and a permanent one", []string{
		"CREATE TABLE IF NOT EXISTS public.h35_shadow_%[1]s (id int PRIMARY KEY)",
		"CREATE TABLE IF NOT EXISTS public.h35_victim_%[1]s (id int PRIMARY KEY)",
		"CREATE TEMP TABLE h35_shadow_%[1]s (id int)"},
		"DROP TABLE IF EXISTS h35_shadow_%[1]s, public.h35_victim_%[1]s", "refused", ""},
	{"foreign key to permanent", []string{tmpTable}, "ALTER TABLE h35_t ADD FOREIGN KEY (a) REFERENCES public.notes (id)", "fails", ""},
	{"security label", []string{tmpTable}, "SECURITY LABEL ON TABLE h35_t IS 'x'", "fails", ""},
}

const (
	tmpTable    = "CREATE TEMP TABLE h35_t (a int, b int)"
	tmpStats    = "CREATE STATISTICS h35_s_%[1]s ON a, b FROM h35_t"
	tmpType     = "CREATE TYPE pg_temp.h35_ty AS (a int)"
	tmpDomain   = "CREATE DOMAIN pg_temp.h35_dom AS int CONSTRAINT positive CHECK (VALUE > 0)"
	tmpFunction = "CREATE FUNCTION pg_temp.h35_f() RETURNS int LANGUAGE sql AS 'SELECT 1'"
)

// TestDDLOnTemporaryObjectsStaysLocalOrIsRefused runs every kind, as a
// superuser (whose DDL the DDL guard lets through everywhere), in the
// simple and the extended protocol, on one cluster: after each, a
// replicated write must reach the other replica, and at the end nothing
// of the temporary objects may exist there.
func TestDDLOnTemporaryObjectsStaysLocalOrIsRefused(t *testing.T) {
	c := redteamCluster(t)
	ctx := context.Background()
	modes := []struct {
		name string
		exec func(*pgx.Conn, string) error
		user string
	}{{"simple", execSimple, "postgres"}, {"extended", execExtended, "postgres"}, {"mallory", execExtended, "mallory"}}
	writer, other := c.connect(0), c.direct(1)
	row := 1000
	for _, mode := range modes {
		for _, tc := range tempDDLCases {
			if mode.user != "postgres" && tc.want != "local" && tc.want != "fails" {
				continue // refused by the DDL guard (42501) or the proxy alike
			}
			conn := c.connectWith(0, func(cfg *pgx.ConnConfig) { cfg.User = mode.user })
			for _, sql := range tc.setup {
				if err := mode.exec(conn, forMode(sql, mode.name)); err != nil {
					t.Fatalf("%s / %s: setup %s: %v", mode.name, tc.name, sql, err)
				}
			}
			sql := forMode(tc.sql, mode.name)
			want := tc.want
			if mode.user != "postgres" && tc.roleWant != "" {
				want = tc.roleWant
			}
			checkTempDDLOutcome(t, mode.name+" / "+tc.name, want, mode.exec(conn, sql))
			conn.Close(ctx)
			row++
			execSQL(t, writer, `INSERT INTO public.notes VALUES ($1, $2)`, row, mode.name+" / "+tc.name)
			if !otherReplicaApplies(c, other) {
				t.Fatalf("%s / %s: %s stopped the other replica's applier", mode.name, tc.name, sql)
			}
		}
	}
	c.converge(15 * time.Second)
	// The other replica has the permanent objects named h35* that this one
	// has (the setups' and the replicated function's), and nothing else.
	permanent := func(i int, where string) string {
		var got string
		q := `SELECT coalesce(string_agg(name, ' ' ORDER BY name), '') FROM (
			SELECT nspname || '.' || relname FROM pg_class JOIN pg_namespace AS n ON n.oid = relnamespace WHERE relname LIKE 'h35%'
			UNION ALL SELECT nspname || '.' || typname FROM pg_type JOIN pg_namespace AS n ON n.oid = typnamespace
				WHERE typname LIKE 'h35%' OR typname LIKE '\_h35%'
			UNION ALL SELECT nspname || '.' || proname FROM pg_proc JOIN pg_namespace AS n ON n.oid = pronamespace WHERE proname LIKE 'h35%'
			UNION ALL SELECT nspname || '.' || stxname FROM pg_statistic_ext JOIN pg_namespace AS n ON n.oid = stxnamespace WHERE stxname LIKE 'h35%'
			UNION ALL SELECT nspname || '.' || oprname FROM pg_operator JOIN pg_namespace AS n ON n.oid = oprnamespace WHERE oprname = '==='
		) AS o(name) WHERE ` + where
		if err := c.direct(i).QueryRow(ctx, q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	here, there := permanent(0, `name NOT LIKE 'pg\_temp%'`), permanent(1, "true")
	if here != there || !strings.Contains(there, "public.h35_g2_simple") || !strings.Contains(there, "public.h35_shadow_simple") {
		t.Errorf("the other replica has the objects %q, want the permanent ones of this replica, %q", there, here)
	}
}

// otherReplicaApplies waits until the other replica (through its direct
// connection other) holds the certifier's durable version.
func otherReplicaApplies(c *testCluster, other *pgx.Conn) bool {
	target := c.certifier.Service.DurableVersion()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if v, err := replica.ReadVersion(context.Background(), other); err == nil && v >= target {
			return true
		}
	}
	return false
}

// forMode puts the protocol's name into sql where it asks for it.
func forMode(sql, mode string) string {
	if strings.Contains(sql, "%[1]s") {
		return fmt.Sprintf(sql, mode)
	}
	return sql
}

func checkTempDDLOutcome(t *testing.T, name, want string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	switch want {
	case "local":
		if err != nil {
			t.Errorf("%s: %v, want it to run on this replica", name, err)
		}
	case "refused":
		if pgErr == nil || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, "tashkent") || pgErr.Hint == "" {
			t.Errorf("%s: %v, want tashkent's 0A000 with a hint", name, err)
		}
	case "replicated":
		if err != nil {
			t.Errorf("%s: %v, want it to run", name, err)
		}
	case "guard":
		if pgErr == nil || pgErr.Code != "42501" {
			t.Errorf("%s: %v, want the DDL guard's 42501", name, err)
		}
	case "fails":
		if pgErr == nil {
			t.Errorf("%s: %v, want PostgreSQL's error", name, err)
		}
	}
}

// A pipeline that creates a temporary table and then acts on it by a name
// without a schema cannot be judged before it runs (the table does not
// exist yet): refused, where it used to replicate the index.
func TestPipelinedDDLOnATemporaryTableOfThePipelineIsRefused(t *testing.T) {
	c := redteamCluster(t)
	conn := c.connect(0)
	batch := &pgx.Batch{}
	batch.Queue(`CREATE TEMP TABLE h35_bt (a int)`)
	batch.Queue(`CREATE INDEX ON h35_bt (a)`)
	err := conn.SendBatch(context.Background(), batch).Close()
	checkTempDDLOutcome(t, "pipelined CREATE TEMP TABLE, CREATE INDEX", "refused", err)
	// In one simple Query the proxy runs the statements one by one, and
	// asks about the name when the table exists: local.
	if err := execSimple(conn, `CREATE TEMP TABLE h35_mt (a int); CREATE INDEX h35_mt_a ON h35_mt (a); ALTER TABLE h35_mt ADD COLUMN b int; COMMENT ON TABLE h35_mt IS 'x'`); err != nil {
		t.Fatalf("one Query of temporary DDL: %v", err)
	}
	execSQL(t, conn, `INSERT INTO public.notes VALUES (1, 'after the pipeline')`)
	c.converge(15 * time.Second)
	if n := c.countOn(1, `SELECT count(*) FROM pg_class WHERE relname LIKE 'h35_m%'`); n != 0 {
		t.Errorf("the other replica has %d of the temporary relations", n)
	}
}
