package sqlclass

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// want is one expected statement; zero fields are checked too (a Read must not
// claim ReadOnly, a Begin without isolation must report "").
type want struct {
	Kind      Kind
	Tag       string
	SQL       string // checked only when non-empty
	Isolation string
	ReadOnly  bool
	TempOnly  bool
	Chain     bool
	Name      string
	Inner     Kind
}

var classifyCases = []struct {
	name string
	sql  string
	want []want
}{
	// Transaction control.
	{"begin", "BEGIN", []want{{Kind: Begin, Tag: "BEGIN"}}},
	{"begin work", "begin work;", []want{{Kind: Begin, Tag: "BEGIN", SQL: "begin work"}}},
	{"begin isolation", "BEGIN ISOLATION LEVEL REPEATABLE READ", []want{{Kind: Begin, Tag: "BEGIN", Isolation: "repeatable read"}}},
	{"begin read only", "BEGIN READ ONLY", []want{{Kind: Begin, Tag: "BEGIN", ReadOnly: true}}},
	{"begin read write", "BEGIN READ WRITE", []want{{Kind: Begin, Tag: "BEGIN"}}},
	{"start transaction serializable", "START TRANSACTION ISOLATION LEVEL SERIALIZABLE",
		[]want{{Kind: Begin, Tag: "START TRANSACTION", Isolation: "serializable"}}},
	{"start transaction mixed modes", "start transaction read only, isolation level read committed, deferrable",
		[]want{{Kind: Begin, Tag: "START TRANSACTION", Isolation: "read committed", ReadOnly: true}}},
	{"begin read uncommitted", "BEGIN TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
		[]want{{Kind: Begin, Tag: "BEGIN", Isolation: "read uncommitted"}}},
	{"commit", "COMMIT", []want{{Kind: Commit, Tag: "COMMIT"}}},
	{"end", "END", []want{{Kind: Commit, Tag: "COMMIT"}}},
	{"end transaction", "end transaction", []want{{Kind: Commit, Tag: "COMMIT"}}},
	{"commit and chain", "COMMIT AND CHAIN", []want{{Kind: Commit, Tag: "COMMIT", Chain: true}}},
	{"commit and no chain", "COMMIT AND NO CHAIN", []want{{Kind: Commit, Tag: "COMMIT"}}},
	{"rollback", "ROLLBACK", []want{{Kind: Rollback, Tag: "ROLLBACK"}}},
	{"abort", "ABORT", []want{{Kind: Rollback, Tag: "ROLLBACK"}}},
	{"rollback and chain", "ROLLBACK AND CHAIN", []want{{Kind: Rollback, Tag: "ROLLBACK", Chain: true}}},
	{"savepoint", "SAVEPOINT sp1", []want{{Kind: Savepoint, Tag: "SAVEPOINT", Name: "sp1"}}},
	{"release", "RELEASE SAVEPOINT sp1", []want{{Kind: Release, Tag: "RELEASE", Name: "sp1"}}},
	{"release short", "RELEASE sp1", []want{{Kind: Release, Tag: "RELEASE", Name: "sp1"}}},
	{"rollback to", "ROLLBACK TO SAVEPOINT sp1", []want{{Kind: RollbackTo, Tag: "ROLLBACK", Name: "sp1"}}},
	{"rollback to short", "ROLLBACK TO sp1", []want{{Kind: RollbackTo, Tag: "ROLLBACK", Name: "sp1"}}},
	{"prepare transaction", "PREPARE TRANSACTION 'g1'", []want{{Kind: PrepareTransaction, Tag: "PREPARE TRANSACTION", Name: "g1"}}},
	{"commit prepared", "COMMIT PREPARED 'g1'", []want{{Kind: CommitPrepared, Tag: "COMMIT PREPARED", Name: "g1"}}},
	{"rollback prepared", "ROLLBACK PREPARED 'g1'", []want{{Kind: RollbackPrepared, Tag: "ROLLBACK PREPARED", Name: "g1"}}},

	// Reads.
	{"select", "SELECT 1", []want{{Kind: Read, Tag: "SELECT"}}},
	{"select from", "SELECT a, b FROM t WHERE a > 1 ORDER BY b", []want{{Kind: Read, Tag: "SELECT"}}},
	{"values", "VALUES (1), (2)", []want{{Kind: Read, Tag: "SELECT"}}},
	{"table", "TABLE t", []want{{Kind: Read, Tag: "SELECT"}}},
	{"union", "SELECT 1 UNION ALL SELECT 2", []want{{Kind: Read, Tag: "SELECT"}}},
	{"cte read", "WITH x AS (SELECT 1) SELECT * FROM x", []want{{Kind: Read, Tag: "SELECT"}}},
	{"volatile function is read", "SELECT nextval('s'), my_writing_function()", []want{{Kind: Read, Tag: "SELECT"}}},
	{"show", "SHOW transaction_isolation", []want{{Kind: Read, Tag: "SHOW", Name: "transaction_isolation"}}},
	{"explain", "EXPLAIN SELECT 1", []want{{Kind: Read, Tag: "EXPLAIN", Inner: Read}}},
	{"explain dml without analyze", "EXPLAIN DELETE FROM t", []want{{Kind: Read, Tag: "EXPLAIN", Inner: Write}}},
	{"explain analyze false", "EXPLAIN (ANALYZE false, COSTS off) UPDATE t SET a = 1",
		[]want{{Kind: Read, Tag: "EXPLAIN", Inner: Write}}},
	{"explain analyze select", "EXPLAIN ANALYZE SELECT 1", []want{{Kind: Read, Tag: "EXPLAIN", Inner: Read}}},
	{"declare cursor", "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t", []want{{Kind: Read, Tag: "DECLARE CURSOR", Name: "c", Inner: Read}}},
	{"fetch", "FETCH 10 FROM c", []want{{Kind: Read, Tag: "FETCH", Name: "c"}}},
	{"move", "MOVE NEXT IN c", []want{{Kind: Read, Tag: "MOVE", Name: "c"}}},
	{"close", "CLOSE c", []want{{Kind: Read, Tag: "CLOSE CURSOR", Name: "c"}}},
	{"close all", "CLOSE ALL", []want{{Kind: Read, Tag: "CLOSE CURSOR ALL"}}},

	// Writes.
	{"insert", "INSERT INTO t VALUES (1)", []want{{Kind: Write, Tag: "INSERT"}}},
	{"insert select returning", "INSERT INTO t SELECT * FROM u RETURNING id", []want{{Kind: Write, Tag: "INSERT"}}},
	{"upsert", "INSERT INTO t VALUES (1) ON CONFLICT (id) DO UPDATE SET v = excluded.v", []want{{Kind: Write, Tag: "INSERT"}}},
	{"update", "UPDATE t SET a = a + 1 WHERE id = $1", []want{{Kind: Write, Tag: "UPDATE"}}},
	{"delete", "DELETE FROM t WHERE id = 1", []want{{Kind: Write, Tag: "DELETE"}}},
	{"merge", "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)",
		[]want{{Kind: Write, Tag: "MERGE"}}},
	{"cte delete then select", "WITH x AS (DELETE FROM t WHERE a < 0 RETURNING *) SELECT count(*) FROM x",
		[]want{{Kind: Write, Tag: "SELECT"}}},
	{"cte insert nested in cte", "WITH a AS (SELECT 1), b AS (INSERT INTO t SELECT * FROM a RETURNING 1) SELECT * FROM b",
		[]want{{Kind: Write, Tag: "SELECT"}}},
	{"cte select then insert", "WITH x AS (SELECT 1 AS v) INSERT INTO t SELECT v FROM x", []want{{Kind: Write, Tag: "INSERT"}}},
	{"select for update", "SELECT * FROM t WHERE id = 1 FOR UPDATE", []want{{Kind: Write, Tag: "SELECT"}}},
	{"select for no key update skip locked", "SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED", []want{{Kind: Write, Tag: "SELECT"}}},
	{"select for share", "SELECT * FROM t FOR SHARE", []want{{Kind: Write, Tag: "SELECT"}}},
	{"select for key share of", "SELECT * FROM t, u FOR KEY SHARE OF t NOWAIT", []want{{Kind: Write, Tag: "SELECT"}}},
	{"locking clause in subquery", "SELECT * FROM (SELECT * FROM t FOR UPDATE) s", []want{{Kind: Write, Tag: "SELECT"}}},
	{"explain analyze insert", "EXPLAIN ANALYZE INSERT INTO t VALUES (1)", []want{{Kind: Write, Tag: "EXPLAIN", Inner: Write}}},
	{"explain (analyze) delete", "EXPLAIN (ANALYZE, BUFFERS) DELETE FROM t", []want{{Kind: Write, Tag: "EXPLAIN", Inner: Write}}},
	{"explain (analyze on) update", "EXPLAIN (ANALYZE on) UPDATE t SET a = 1", []want{{Kind: Write, Tag: "EXPLAIN", Inner: Write}}},
	{"declare cursor for update", "DECLARE c CURSOR FOR SELECT * FROM t FOR UPDATE", []want{{Kind: Write, Tag: "DECLARE CURSOR", Name: "c", Inner: Write}}},
	{"insert into pg_temp", "INSERT INTO pg_temp.scratch VALUES (1)", []want{{Kind: Write, Tag: "INSERT", TempOnly: true}}},
	{"insert unqualified is not known temp", "INSERT INTO scratch VALUES (1)", []want{{Kind: Write, Tag: "INSERT"}}},
	{"copy query returning to stdout", "COPY (INSERT INTO t VALUES (1) RETURNING *) TO STDOUT", []want{{Kind: Write, Tag: "COPY"}}},

	// SELECT INTO and CREATE TABLE AS create a table: DDL.
	{"select into", "SELECT * INTO newt FROM t", []want{{Kind: DDL, Tag: "SELECT"}}},
	{"select into temp", "SELECT * INTO TEMP newt FROM t", []want{{Kind: DDL, Tag: "SELECT", TempOnly: true}}},
	{"create table as", "CREATE TABLE n AS SELECT * FROM t", []want{{Kind: DDL, Tag: "SELECT"}}},
	{"create temp table as", "CREATE TEMP TABLE n AS SELECT * FROM t", []want{{Kind: DDL, Tag: "SELECT", TempOnly: true}}},
	{"create table as with no data", "CREATE TABLE n AS SELECT * FROM t WITH NO DATA", []want{{Kind: DDL, Tag: "CREATE TABLE AS"}}},
	{"create matview", "CREATE MATERIALIZED VIEW mv AS SELECT 1", []want{{Kind: DDL, Tag: "SELECT"}}},
	{"explain analyze ctas", "EXPLAIN ANALYZE CREATE TABLE n AS SELECT 1", []want{{Kind: DDL, Tag: "EXPLAIN", Inner: DDL}}},

	// Truncate.
	{"truncate", "TRUNCATE t, u RESTART IDENTITY", []want{{Kind: Truncate, Tag: "TRUNCATE TABLE"}}},
	{"truncate temp", "TRUNCATE pg_temp.t", []want{{Kind: Truncate, Tag: "TRUNCATE TABLE", TempOnly: true}}},

	// DDL.
	{"create table", "CREATE TABLE t (id int PRIMARY KEY, v text)", []want{{Kind: DDL, Tag: "CREATE TABLE"}}},
	{"create temp table", "CREATE TEMP TABLE t (id int)", []want{{Kind: DDL, Tag: "CREATE TABLE", TempOnly: true}}},
	{"create temporary table on commit drop", "CREATE TEMPORARY TABLE t (id int) ON COMMIT DROP", []want{{Kind: DDL, Tag: "CREATE TABLE", TempOnly: true}}},
	{"create unlogged table", "CREATE UNLOGGED TABLE t (id int)", []want{{Kind: DDL, Tag: "CREATE TABLE"}}},
	{"create temp view", "CREATE TEMP VIEW v AS SELECT * FROM t", []want{{Kind: DDL, Tag: "CREATE VIEW", TempOnly: true}}},
	{"create view", "CREATE OR REPLACE VIEW v AS SELECT 1", []want{{Kind: DDL, Tag: "CREATE VIEW"}}},
	{"create temp sequence", "CREATE TEMP SEQUENCE s", []want{{Kind: DDL, Tag: "CREATE SEQUENCE", TempOnly: true}}},
	{"create index", "CREATE INDEX CONCURRENTLY i ON t (v)", []want{{Kind: DDL, Tag: "CREATE INDEX"}}},
	{"alter table", "ALTER TABLE t ADD COLUMN w int", []want{{Kind: DDL, Tag: "ALTER TABLE"}}},
	{"alter index", "ALTER INDEX i SET (fillfactor = 50)", []want{{Kind: DDL, Tag: "ALTER INDEX"}}},
	{"alter table rename column", "ALTER TABLE t RENAME COLUMN a TO b", []want{{Kind: DDL, Tag: "ALTER TABLE"}}},
	{"alter view rename", "ALTER VIEW v RENAME TO w", []want{{Kind: DDL, Tag: "ALTER VIEW"}}},
	{"drop table", "DROP TABLE IF EXISTS t, u CASCADE", []want{{Kind: DDL, Tag: "DROP TABLE"}}},
	{"drop pg_temp table", "DROP TABLE pg_temp.t", []want{{Kind: DDL, Tag: "DROP TABLE", TempOnly: true}}},
	// review h33, finding 4: replicated, they stopped the other replicas' appliers.
	{"trigger on pg_temp table", "CREATE TRIGGER k BEFORE UPDATE ON pg_temp.t FOR EACH ROW EXECUTE FUNCTION f()", []want{{Kind: DDL, Tag: "CREATE TRIGGER", TempOnly: true}}},
	{"rule on pg_temp table", "CREATE RULE r AS ON DELETE TO pg_temp.t DO INSTEAD NOTHING", []want{{Kind: DDL, Tag: "CREATE RULE", TempOnly: true}}},
	{"policy on pg_temp table", "CREATE POLICY p ON pg_temp.t USING (true)", []want{{Kind: DDL, Tag: "CREATE POLICY", TempOnly: true}}},
	{"alter policy on pg_temp table", "ALTER POLICY p ON pg_temp.t USING (true)", []want{{Kind: DDL, Tag: "ALTER POLICY", TempOnly: true}}},
	// review h33, finding 5: the same for COMMENT ON.
	{"comment on pg_temp table", "COMMENT ON TABLE pg_temp.t IS 'x'", []want{{Kind: DDL, Tag: "COMMENT", TempOnly: true}}},
	{"comment on pg_temp column", "COMMENT ON COLUMN pg_temp.t.c IS 'x'", []want{{Kind: DDL, Tag: "COMMENT", TempOnly: true}}},
	{"comment on permanent column", "COMMENT ON COLUMN public.t.c IS 'x'", []want{{Kind: DDL, Tag: "COMMENT"}}},
	{"comment on unqualified column", "COMMENT ON COLUMN t.c IS 'x'", []want{{Kind: DDL, Tag: "COMMENT"}}},
	{"trigger on permanent table", "CREATE TRIGGER k BEFORE UPDATE ON public.t FOR EACH ROW EXECUTE FUNCTION f()", []want{{Kind: DDL, Tag: "CREATE TRIGGER"}}},
	{"drop index", "DROP INDEX i", []want{{Kind: DDL, Tag: "DROP INDEX"}}},
	{"drop function", "DROP FUNCTION f(int)", []want{{Kind: DDL, Tag: "DROP FUNCTION"}}},
	{"create function dollar quoted", "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $fn$ SELECT 1; $fn$",
		[]want{{Kind: DDL, Tag: "CREATE FUNCTION"}}},
	{"create procedure", "CREATE PROCEDURE p() LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$", []want{{Kind: DDL, Tag: "CREATE PROCEDURE"}}},
	{"comment", "COMMENT ON TABLE t IS 'x; y'", []want{{Kind: DDL, Tag: "COMMENT"}}},
	{"grant", "GRANT SELECT ON t TO PUBLIC", []want{{Kind: DDL, Tag: "GRANT"}}},
	{"revoke", "REVOKE ALL ON t FROM bob", []want{{Kind: DDL, Tag: "REVOKE"}}},
	{"grant role", "GRANT admin TO bob", []want{{Kind: DDL, Tag: "GRANT ROLE"}}},
	{"create role", "CREATE ROLE bob LOGIN PASSWORD 'x'", []want{{Kind: DDL, Tag: "CREATE ROLE"}}},
	{"create user", "CREATE USER bob", []want{{Kind: DDL, Tag: "CREATE ROLE"}}},
	{"create schema", "CREATE SCHEMA s", []want{{Kind: DDL, Tag: "CREATE SCHEMA"}}},
	{"create type enum", "CREATE TYPE mood AS ENUM ('sad', 'ok')", []want{{Kind: DDL, Tag: "CREATE TYPE"}}},
	{"create extension", "CREATE EXTENSION IF NOT EXISTS pgcrypto", []want{{Kind: DDL, Tag: "CREATE EXTENSION"}}},
	{"create database", "CREATE DATABASE d", []want{{Kind: DDL, Tag: "CREATE DATABASE"}}},
	{"create trigger", "CREATE TRIGGER tr AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()", []want{{Kind: DDL, Tag: "CREATE TRIGGER"}}},
	{"refresh matview", "REFRESH MATERIALIZED VIEW mv", []want{{Kind: DDL, Tag: "REFRESH MATERIALIZED VIEW"}}},
	{"alter sequence", "ALTER SEQUENCE s RESTART WITH 10", []want{{Kind: DDL, Tag: "ALTER SEQUENCE"}}},
	{"alter owner", "ALTER TABLE t OWNER TO bob", []want{{Kind: DDL, Tag: "ALTER TABLE"}}},
	{"alter function set schema", "ALTER FUNCTION f() SET SCHEMA s", []want{{Kind: DDL, Tag: "ALTER FUNCTION"}}},

	// Set.
	{"set", "SET search_path TO s, public", []want{{Kind: Set, Tag: "SET", Name: "search_path"}}},
	{"set local", "SET LOCAL statement_timeout = 0", []want{{Kind: Set, Tag: "SET", Name: "statement_timeout"}}},
	{"reset", "RESET search_path", []want{{Kind: Set, Tag: "RESET", Name: "search_path"}}},
	{"reset all", "RESET ALL", []want{{Kind: Set, Tag: "RESET"}}},
	{"set transaction", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
		[]want{{Kind: Set, Tag: "SET", Name: "transaction", Isolation: "serializable"}}},
	{"set transaction read only", "SET TRANSACTION READ ONLY", []want{{Kind: Set, Tag: "SET", Name: "transaction", ReadOnly: true}}},
	{"set transaction snapshot", "SET TRANSACTION SNAPSHOT '00000003-0000001B-1'", []want{{Kind: Set, Tag: "SET", Name: "transaction snapshot"}}},
	{"set session characteristics", "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
		[]want{{Kind: Set, Tag: "SET", Name: "session characteristics", Isolation: "read committed"}}},
	{"set default isolation quoted", "SET default_transaction_isolation = 'serializable'",
		[]want{{Kind: Set, Tag: "SET", Name: "default_transaction_isolation", Isolation: "serializable"}}},
	{"set default isolation bare", "set DEFAULT_TRANSACTION_ISOLATION to 'Repeatable  Read'",
		[]want{{Kind: Set, Tag: "SET", Name: "default_transaction_isolation", Isolation: "repeatable read"}}},
	{"set session default isolation", "SET SESSION default_transaction_isolation TO 'read committed'",
		[]want{{Kind: Set, Tag: "SET", Name: "default_transaction_isolation", Isolation: "read committed"}}},
	{"set transaction_isolation guc", "SET transaction_isolation = 'repeatable read'",
		[]want{{Kind: Set, Tag: "SET", Name: "transaction_isolation", Isolation: "repeatable read"}}},
	{"set default isolation to default", "SET default_transaction_isolation TO DEFAULT",
		[]want{{Kind: Set, Tag: "SET", Name: "default_transaction_isolation"}}},
	{"set default read only", "SET default_transaction_read_only = on",
		[]want{{Kind: Set, Tag: "SET", Name: "default_transaction_read_only", ReadOnly: true}}},
	{"set default read only off", "SET default_transaction_read_only = off",
		[]want{{Kind: Set, Tag: "SET", Name: "default_transaction_read_only"}}},
	{"set constraints", "SET CONSTRAINTS ALL DEFERRED", []want{{Kind: Set, Tag: "SET CONSTRAINTS", Name: "constraints"}}},

	// Copy.
	{"copy to stdout", "COPY t TO STDOUT WITH (FORMAT csv)", []want{{Kind: CopyTo, Tag: "COPY"}}},
	{"copy query to stdout", "COPY (SELECT * FROM t) TO STDOUT", []want{{Kind: CopyTo, Tag: "COPY"}}},
	{"copy from stdin", "COPY t (a, b) FROM STDIN", []want{{Kind: CopyFrom, Tag: "COPY"}}},
	{"copy from stdin temp", "COPY pg_temp.t FROM STDIN", []want{{Kind: CopyFrom, Tag: "COPY", TempOnly: true}}},

	// Notifications.
	{"listen", "LISTEN ch", []want{{Kind: Listen, Tag: "LISTEN", Name: "ch"}}},
	{"notify", "NOTIFY ch, 'payload; with semicolon'", []want{{Kind: Notify, Tag: "NOTIFY", Name: "ch"}}},
	{"unlisten", "UNLISTEN ch", []want{{Kind: Unlisten, Tag: "UNLISTEN", Name: "ch"}}},
	{"unlisten star", "UNLISTEN *", []want{{Kind: Unlisten, Tag: "UNLISTEN", Name: "*"}}},

	// Locks.
	{"lock table", "LOCK TABLE t IN ACCESS EXCLUSIVE MODE", []want{{Kind: LockTable, Tag: "LOCK TABLE"}}},
	{"lock short", "LOCK t", []want{{Kind: LockTable, Tag: "LOCK TABLE"}}},

	// SQL-level prepared statements.
	{"prepare select", "PREPARE q(int) AS SELECT $1", []want{{Kind: Prepare, Tag: "PREPARE", Name: "q", Inner: Read}}},
	{"prepare insert", "PREPARE ins AS INSERT INTO t VALUES ($1)", []want{{Kind: Prepare, Tag: "PREPARE", Name: "ins", Inner: Write}}},
	{"execute", "EXECUTE q(1)", []want{{Kind: Execute, Tag: "", Name: "q"}}},
	{"deallocate", "DEALLOCATE q", []want{{Kind: Deallocate, Tag: "DEALLOCATE", Name: "q"}}},
	{"deallocate prepare", "DEALLOCATE PREPARE q", []want{{Kind: Deallocate, Tag: "DEALLOCATE", Name: "q"}}},
	{"deallocate all", "DEALLOCATE ALL", []want{{Kind: Deallocate, Tag: "DEALLOCATE ALL"}}},

	// Discard.
	{"discard all", "DISCARD ALL", []want{{Kind: Discard, Tag: "DISCARD ALL", Name: "all"}}},
	{"discard plans", "DISCARD PLANS", []want{{Kind: Discard, Tag: "DISCARD PLANS", Name: "plans"}}},
	{"discard sequences", "DISCARD SEQUENCES", []want{{Kind: Discard, Tag: "DISCARD SEQUENCES", Name: "sequences"}}},
	{"discard temp", "DISCARD TEMPORARY", []want{{Kind: Discard, Tag: "DISCARD TEMP", Name: "temp"}}},

	// Maintenance.
	{"vacuum", "VACUUM (ANALYZE) t", []want{{Kind: Vacuum, Tag: "VACUUM"}}},
	{"vacuum full", "VACUUM FULL", []want{{Kind: Vacuum, Tag: "VACUUM"}}},
	{"analyze", "ANALYZE t", []want{{Kind: Analyze, Tag: "ANALYZE"}}},
	{"analyse", "ANALYSE VERBOSE", []want{{Kind: Analyze, Tag: "ANALYZE"}}},
	{"cluster", "CLUSTER t USING i", []want{{Kind: Maintenance, Tag: "CLUSTER"}}},
	{"reindex", "REINDEX TABLE t", []want{{Kind: Maintenance, Tag: "REINDEX"}}},
	{"checkpoint", "CHECKPOINT", []want{{Kind: Maintenance, Tag: "CHECKPOINT"}}},

	// Code.
	{"call", "CALL p(1)", []want{{Kind: Call, Tag: "CALL"}}},
	{"do", "DO $$ BEGIN INSERT INTO t VALUES (1); END $$", []want{{Kind: Call, Tag: "DO"}}},

	// Other.
	{"load", "LOAD 'auto_explain'", []want{{Kind: Other, Tag: "LOAD"}}},
	{"alter system", "ALTER SYSTEM SET work_mem = '8MB'", []want{{Kind: Other, Tag: "ALTER SYSTEM"}}},

	// Splitting.
	{"empty", "", nil},
	{"only semicolons and comments", " ; ;-- nothing\n/* here */;", nil},
	{"begin insert commit", "BEGIN; INSERT INTO t VALUES (1); COMMIT;", []want{
		{Kind: Begin, Tag: "BEGIN", SQL: "BEGIN"},
		{Kind: Write, Tag: "INSERT", SQL: "INSERT INTO t VALUES (1)"},
		{Kind: Commit, Tag: "COMMIT", SQL: "COMMIT"},
	}},
	{"no trailing semicolon", "select 1;select 2", []want{
		{Kind: Read, Tag: "SELECT", SQL: "select 1"},
		{Kind: Read, Tag: "SELECT", SQL: "select 2"},
	}},
	{"comments", "-- leading ; comment\nSELECT 1 /* inner ; comment /* nested; */ still */ ; /* c */ COMMIT -- trailing ;", []want{
		{Kind: Read, Tag: "SELECT", SQL: "-- leading ; comment\nSELECT 1 /* inner ; comment /* nested; */ still */"},
		{Kind: Commit, Tag: "COMMIT", SQL: "/* c */ COMMIT -- trailing ;"},
	}},
	{"dollar quoting", "SELECT $$ a; b $$; SELECT $tag$ ; $$ ; $tag$; DO $x$BEGIN PERFORM 1; END$x$", []want{
		{Kind: Read, Tag: "SELECT", SQL: "SELECT $$ a; b $$"},
		{Kind: Read, Tag: "SELECT", SQL: "SELECT $tag$ ; $$ ; $tag$"},
		{Kind: Call, Tag: "DO", SQL: "DO $x$BEGIN PERFORM 1; END$x$"},
	}},
	{"quoted strings and identifiers", `SELECT 'a;b', E'c\';d', "we;ird" FROM "t;"; SELECT 2`, []want{
		{Kind: Read, Tag: "SELECT", SQL: `SELECT 'a;b', E'c\';d', "we;ird" FROM "t;"`},
		{Kind: Read, Tag: "SELECT", SQL: "SELECT 2"},
	}},
	{"unicode before statement", "SELECT 'héllo ✓'; DELETE FROM t", []want{
		{Kind: Read, Tag: "SELECT", SQL: "SELECT 'héllo ✓'"},
		{Kind: Write, Tag: "DELETE", SQL: "DELETE FROM t"},
	}},
	{"transaction with savepoints", "BEGIN ISOLATION LEVEL SERIALIZABLE; SAVEPOINT a; UPDATE t SET v=1; ROLLBACK TO a; RELEASE a; END", []want{
		{Kind: Begin, Tag: "BEGIN", Isolation: "serializable"},
		{Kind: Savepoint, Tag: "SAVEPOINT", Name: "a"},
		{Kind: Write, Tag: "UPDATE"},
		{Kind: RollbackTo, Tag: "ROLLBACK", Name: "a"},
		{Kind: Release, Tag: "RELEASE", Name: "a"},
		{Kind: Commit, Tag: "COMMIT", SQL: "END"},
	}},
}

func TestClassify(t *testing.T) {
	for _, tc := range classifyCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Classify(tc.sql)
			if err != nil {
				t.Fatalf("Classify(%q): %v", tc.sql, err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Classify(%q): %d statements %+v, want %d", tc.sql, len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				gw := want{Kind: g.Kind, Tag: g.Tag, Isolation: g.Isolation, ReadOnly: g.ReadOnly,
					TempOnly: g.TempOnly, Chain: g.Chain, Name: g.Name, Inner: g.Inner}
				if w.SQL != "" {
					gw.SQL = g.SQL
				}
				if gw != w {
					t.Errorf("Classify(%q)[%d] =\n  %+v\nwant\n  %+v", tc.sql, i, gw, w)
				}
				if g.SQL == "" {
					t.Errorf("Classify(%q)[%d]: empty SQL", tc.sql, i)
				}
				if !strings.Contains(tc.sql, g.SQL) {
					t.Errorf("Classify(%q)[%d].SQL = %q is not a slice of the input", tc.sql, i, g.SQL)
				}
			}
		})
	}
}

// TestEveryKindCovered fails when a Kind is added without a test case.
func TestEveryKindCovered(t *testing.T) {
	seen := map[Kind]bool{}
	for _, tc := range classifyCases {
		for _, w := range tc.want {
			seen[w.Kind] = true
		}
	}
	for _, k := range Kinds() {
		if !seen[k] {
			t.Errorf("no test case for Kind %v", k)
		}
	}
}

func TestKindString(t *testing.T) {
	names := map[string]bool{}
	for _, k := range Kinds() {
		s := k.String()
		if s == "" || strings.HasPrefix(s, "Kind(") {
			t.Errorf("Kind %d has no name", int(k))
		}
		if names[s] {
			t.Errorf("duplicate Kind name %q", s)
		}
		names[s] = true
	}
	if got := Kind(-1).String(); got != "Kind(-1)" {
		t.Errorf("Kind(-1).String() = %q", got)
	}
	if got := Begin.String(); got != "Begin" {
		t.Errorf("Begin.String() = %q", got)
	}
}

func TestParseError(t *testing.T) {
	cases := []struct {
		sql    string
		msg    string
		cursor int
	}{
		{"SELECT FROM WHERE", `syntax error at or near "WHERE"`, 13},
		{"BEGIN; SELEC 1; COMMIT", `syntax error at or near "SELEC"`, 8},
		{"SELECT 'unterminated", "unterminated quoted string", 8},
		{"SELECT $$ open", "unterminated dollar-quoted string", 8},
		{"SELECT 'ü' FROM", "syntax error at end of input", 16}, // characters, not bytes
		{"SELECT 1\x00; DROP TABLE t", "query string contains a zero byte", 9},
	}
	for _, c := range cases {
		_, err := Classify(c.sql)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("Classify(%q) error = %v, want *ParseError", c.sql, err)
		}
		if !strings.Contains(pe.Message, c.msg) || pe.Cursor != c.cursor {
			t.Errorf("Classify(%q) = %q at %d, want %q at %d", c.sql, pe.Message, pe.Cursor, c.msg, c.cursor)
		}
		if !strings.Contains(err.Error(), fmt.Sprint(c.cursor)) {
			t.Errorf("error text %q does not carry the position", err.Error())
		}
		// Cached errors are the same.
		_, err2 := Classify(c.sql)
		if err2 == nil || err2.Error() != err.Error() {
			t.Errorf("second Classify(%q) = %v, want %v", c.sql, err2, err)
		}
	}
}

func TestCacheReturnsCopies(t *testing.T) {
	const q = "BEGIN; SELECT 1 /* copies */"
	a, err := Classify(q)
	if err != nil {
		t.Fatal(err)
	}
	a[0].Kind = Write
	a[1].SQL = "mutated"
	b, _ := Classify(q)
	if b[0].Kind != Begin || b[1].SQL != "SELECT 1 /* copies */" {
		t.Fatalf("cache entry was mutated through a returned slice: %+v", b)
	}
}

func TestCacheHitsAndBound(t *testing.T) {
	c := newLRU(3)
	for i := 0; i < 5; i++ {
		c.put(fmt.Sprint(i), cacheEntry{})
	}
	if c.len() != 3 {
		t.Fatalf("len = %d, want 3", c.len())
	}
	if _, ok := c.get("0"); ok {
		t.Error("oldest entry 0 survived")
	}
	if _, ok := c.get("2"); !ok {
		t.Error("entry 2 evicted too early")
	}
	c.put("5", cacheEntry{}) // evicts 3, the least recently used now that 2 was used
	if _, ok := c.get("3"); ok {
		t.Error("entry 3 should have been evicted")
	}
	if _, ok := c.get("2"); !ok {
		t.Error("recently used entry 2 was evicted")
	}
	big := strings.Repeat("x", classifyCacheSQLBytesMax+1)
	c.put(big, cacheEntry{})
	if _, ok := c.get(big); ok {
		t.Error("an over-long key was cached")
	}

	// The package cache really serves repeated strings.
	const q = "SELECT 'cache hit test'"
	classifyCache.mu.Lock()
	h0 := classifyCache.hits
	classifyCache.mu.Unlock()
	for i := 0; i < 3; i++ {
		if _, err := Classify(q); err != nil {
			t.Fatal(err)
		}
	}
	classifyCache.mu.Lock()
	h1 := classifyCache.hits
	classifyCache.mu.Unlock()
	if h1-h0 < 2 {
		t.Errorf("cache hits grew by %d over 3 identical calls, want >= 2", h1-h0)
	}
	if n := classifyCache.len(); n > classifyCacheEntriesMax {
		t.Errorf("cache holds %d entries, max %d", n, classifyCacheEntriesMax)
	}
}

func TestClassifyConcurrent(t *testing.T) {
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 200; i++ {
				q := fmt.Sprintf("BEGIN; UPDATE t SET v = %d WHERE id = %d; COMMIT", i, g)
				st, err := Classify(q)
				if err != nil || len(st) != 3 || st[1].Kind != Write {
					t.Errorf("Classify(%q) = %+v, %v", q, st, err)
					return
				}
			}
		}(g)
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases {
		f.Add(tc.sql)
	}
	f.Add("SELECT 'a\x00b'")
	f.Add("SELECT $1::int; ;;; $$")
	f.Add(strings.Repeat("(", 2000))
	f.Add("SELECT " + strings.Repeat("-", 3) + "\n1")
	f.Fuzz(func(t *testing.T, sql string) {
		st, err := Classify(sql)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		for _, s := range st {
			if s.Kind < 0 || s.Kind >= kindCount {
				t.Fatalf("invalid kind %d", s.Kind)
			}
			if !strings.Contains(sql, s.SQL) {
				t.Fatalf("SQL %q not a slice of %q", s.SQL, sql)
			}
		}
	})
}

var benchQueries = []string{
	"SELECT abalance FROM pgbench_accounts WHERE aid = $1",
	"UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
	"BEGIN; INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 2, 3, 4, CURRENT_TIMESTAMP); COMMIT;",
	"WITH x AS (DELETE FROM t WHERE a < 0 RETURNING *) SELECT count(*) FROM x",
}

// BenchmarkClassifyCached measures the cache hit path (repeated Parse texts).
func BenchmarkClassifyCached(b *testing.B) {
	for _, q := range benchQueries {
		if _, err := Classify(q); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Classify(benchQueries[i%len(benchQueries)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClassifyUncached measures a full parse and classification.
func BenchmarkClassifyUncached(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := classifyUncached(benchQueries[i%len(benchQueries)]); err != nil {
			b.Fatal(err)
		}
	}
}
