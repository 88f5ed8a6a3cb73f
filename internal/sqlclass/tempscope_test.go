package sqlclass

import "testing"

// TestTempScopeVerdicts judges DDL on temporary objects (review h35) with
// a catalog in which tmp (a table), ty (a type) and s (statistics on tmp)
// are temporary, and everything else, and the creation schema, permanent.
func TestTempScopeVerdicts(t *testing.T) {
	catalog := func(o ObjectName) bool {
		if temp, known := o.TextTemp(); known {
			return temp
		}
		switch o.Class {
		case RelationName, RelationText:
			return o.Name == "tmp" && !o.Created
		case TypeName:
			return o.Name == "ty" && !o.Created
		case StatisticsName:
			return o.Name == "s"
		}
		return false
	}
	cases := map[string]Verdict{
		"CREATE STATISTICS pg_temp.s2 ON a, b FROM pg_temp.tmp":                          StayLocal,
		"CREATE STATISTICS s2 ON a, b FROM tmp":                                          StayLocal,
		"CREATE STATISTICS s2 ON a, b FROM public.p":                                     Replicate,
		"CREATE STATISTICS pg_temp.s2 ON a, b FROM public.p":                             RefuseMixed,
		"ALTER STATISTICS s SET STATISTICS 10":                                           StayLocal,
		"ALTER STATISTICS public.s SET STATISTICS 10":                                    StayLocal, // on a temporary table
		"DROP STATISTICS s":                                                              StayLocal,
		"COMMENT ON STATISTICS s IS 'x'":                                                 StayLocal,
		"CREATE TYPE pg_temp.t AS (a int)":                                               StayLocal,
		"CREATE TYPE pg_temp.e AS ENUM ('a')":                                            StayLocal,
		"CREATE TYPE pg_temp.r AS RANGE (subtype = int4)":                                StayLocal,
		"CREATE TYPE pg_temp.shell":                                                      StayLocal,
		"CREATE TYPE public.t AS (a int)":                                                Replicate,
		"CREATE TYPE t AS (a int)":                                                       Replicate,
		"ALTER TYPE ty ADD ATTRIBUTE b int":                                              StayLocal,
		"ALTER TYPE ty ADD VALUE 'b'":                                                    StayLocal,
		"ALTER TYPE ty RENAME TO ty2":                                                    StayLocal,
		"ALTER TYPE ty OWNER TO bob":                                                     StayLocal,
		"ALTER TYPE other ADD VALUE 'b'":                                                 Replicate,
		"CREATE DOMAIN pg_temp.d AS int":                                                 StayLocal,
		"ALTER DOMAIN ty SET NOT NULL":                                                   StayLocal,
		"COMMENT ON CONSTRAINT c ON DOMAIN pg_temp.d IS 'x'":                             StayLocal,
		"COMMENT ON TYPE ty IS 'x'":                                                      StayLocal,
		"GRANT USAGE ON TYPE ty TO bob":                                                  StayLocal,
		"DROP TYPE ty, public.u":                                                         RefuseMixed,
		"CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'":             StayLocal,
		"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'":                     Replicate,
		"ALTER FUNCTION pg_temp.f() IMMUTABLE":                                           StayLocal,
		"ALTER FUNCTION f() IMMUTABLE":                                                   Replicate, // the temporary schema is never searched for functions
		"GRANT EXECUTE ON FUNCTION pg_temp.f() TO bob":                                   StayLocal,
		"DROP FUNCTION pg_temp.f(), public.g()":                                          RefuseMixed,
		"CREATE OPERATOR pg_temp.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq)": StayLocal,
		"CREATE VIEW v AS SELECT * FROM tmp":                                             StayLocal, // PostgreSQL makes it temporary
		"CREATE VIEW v AS SELECT pg_temp.f()":                                            RefuseTempReference,
		"CREATE TABLE p AS SELECT * FROM tmp":                                            RefuseTempReference,
		"SELECT * INTO p FROM tmp":                                                       RefuseTempReference,
		"CREATE TEMP TABLE p AS SELECT * FROM public.p":                                  StayLocal,
		"CREATE TABLE p (LIKE tmp)":                                                      RefuseTempReference,
		"CREATE TABLE p (x ty)":                                                          RefuseTempReference,
		"CREATE TABLE p (x pg_temp.ty)":                                                  RefuseTempReference,
		"CREATE TABLE p (x int REFERENCES tmp)":                                          RefuseTempReference,
		"CREATE TABLE p (x int)":                                                         Replicate,
		"CREATE TEMP TABLE x (a ty)":                                                     StayLocal,
		"CREATE CAST (ty AS text) WITH INOUT":                                            RefuseTempReference,
		"CREATE MATERIALIZED VIEW mv AS SELECT * FROM tmp":                               RefuseTempReference,
		"ALTER TABLE p ATTACH PARTITION tmp FOR VALUES IN (1)":                           RefuseTempReference,
		"CREATE FUNCTION g() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM tmp; END": RefuseTempReference,
		"DROP TABLE tmp, public.p":                                                         RefuseMixed,
		"DROP TABLE tmp, pg_temp.tmp2":                                                     StayLocal,
		"DROP TABLE p":                                                                     Replicate,
		"GRANT SELECT ON tmp TO bob":                                                       StayLocal,
		"GRANT SELECT ON tmp, p TO bob":                                                    RefuseMixed,
		"GRANT SELECT ON ALL TABLES IN SCHEMA pg_temp TO bob":                              StayLocal,
		"ALTER TABLE tmp OWNER TO bob":                                                     StayLocal,
		"ALTER TABLE tmp RENAME TO tmp3":                                                   StayLocal,
		"COMMENT ON CONSTRAINT c ON tmp IS 'x'":                                            StayLocal,
		"COMMENT ON COLUMN tmp.c IS 'x'":                                                   StayLocal,
		"SECURITY LABEL ON TABLE tmp IS 'x'":                                               StayLocal,
		"CREATE INDEX ON tmp (a)":                                                          StayLocal,
		"CREATE TRIGGER t AFTER INSERT ON tmp EXECUTE FUNCTION f()":                        StayLocal,
		"CREATE TABLE p (id int DEFAULT nextval('tmp'))":                                   RefuseTempReference,
		"CREATE TABLE p (id int DEFAULT nextval('public.seq'))":                            Replicate,
		"CREATE VIEW v AS SELECT 'tmp'::regclass":                                          RefuseTempReference,
		"EXPLAIN ANALYZE CREATE TABLE p AS SELECT * FROM tmp":                              RefuseTempReference,
		"EXPLAIN ANALYZE CREATE TEMP TABLE p AS SELECT * FROM tmp":                         StayLocal,
		"ALTER DEFAULT PRIVILEGES IN SCHEMA pg_temp GRANT SELECT ON TABLES TO bob":         StayLocal,
		"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO bob":          Replicate,
		"ALTER DEFAULT PRIVILEGES IN SCHEMA public, pg_temp GRANT SELECT ON TABLES TO bob": RefuseMixed,
		"COMMENT ON SCHEMA pg_temp IS 'x'":                                                 StayLocal,
		"DROP SCHEMA pg_temp_3":                                                            StayLocal,
		"DROP EXTENSION hstore":                                                            Replicate,
		"CREATE TRIGGER t AFTER INSERT ON p EXECUTE FUNCTION pg_temp.f()":                  RefuseTempReference,
		"CREATE INDEX ON p (pg_temp.f(a))":                                                 RefuseTempReference,
		"ALTER TABLE p ALTER COLUMN a TYPE pg_temp.ty":                                     RefuseTempReference,
		"CREATE RULE r AS ON INSERT TO p DO ALSO INSERT INTO tmp VALUES (1)":               RefuseTempReference,
		"CREATE COLLATION pg_temp.c FROM \"C\"":                                            StayLocal,
		"CREATE AGGREGATE pg_temp.agg (int) (SFUNC = int4pl, STYPE = int)":                 StayLocal,
		"ALTER AGGREGATE pg_temp.agg (int) RENAME TO agg2":                                 StayLocal,
		"CREATE TEXT SEARCH CONFIGURATION pg_temp.cfg (COPY = english)":                    StayLocal,
		"ALTER SEQUENCE tmp RESTART":                                                       StayLocal,
	}
	for sql, want := range cases {
		stmts, err := Classify(sql)
		if err != nil || len(stmts) != 1 || stmts[0].Kind != DDL || stmts[0].Temp == nil {
			t.Fatalf("%s: %v %v", sql, stmts, err)
		}
		if got := stmts[0].Temp.Verdict(catalog); got != want {
			t.Logf("%+v", stmts[0].Temp)
			t.Errorf("%s: verdict %d, want %d", sql, got, want)
		}
	}
}

// TestTempScopeFromTheTextAlone: what the text settles needs no question
// to the database, and DDL known temporary is TempOnly.
func TestTempScopeFromTheTextAlone(t *testing.T) {
	cases := []struct {
		sql      string
		tempOnly bool
		catalog  int // names to ask the database about
	}{
		{"CREATE STATISTICS pg_temp.s ON a, b FROM pg_temp.t", true, 0},
		{"ALTER TYPE pg_temp.t ADD ATTRIBUTE b int", true, 0},
		{"CREATE TEMP TABLE x (a mytype)", true, 0}, // temporary targets settle it
		{"CREATE TABLE public.x (a int)", false, 0},
		{"ALTER FUNCTION f() IMMUTABLE", false, 0},
		{"CREATE TABLE x (a int)", false, 1},           // the creation schema
		{"CREATE TABLE public.x (a mytype)", false, 1}, // the type
		{"ALTER STATISTICS public.s SET STATISTICS 1", false, 1},
		{"DROP TABLE tmp, public.p", false, 1},
	}
	for _, c := range cases {
		stmts, err := Classify(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		if stmts[0].TempOnly != c.tempOnly || len(stmts[0].Temp.CatalogNames()) != c.catalog {
			t.Errorf("%s: TempOnly %v, catalog names %v; want %v, %d", c.sql, stmts[0].TempOnly, stmts[0].Temp.CatalogNames(), c.tempOnly, c.catalog)
		}
	}
}
