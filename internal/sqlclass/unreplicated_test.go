package sqlclass

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

func TestUnreplicatedFeatures(t *testing.T) {
	cases := []struct {
		sql  string
		want Feature
	}{
		{"LISTEN jobs", Notifications},
		{"NOTIFY jobs, 'x'", Notifications},
		{"SELECT pg_notify('jobs', 'x')", Notifications},
		{"SELECT pg_catalog.pg_notify('jobs', 'x')", Notifications},
		{"UNLISTEN *", Replicated},
		{"SELECT lo_create(0)", LargeObjects},
		{"SELECT lo_from_bytea(0, '\\x00')", LargeObjects},
		{"INSERT INTO docs (id, blob) VALUES (1, lo_import('/etc/hosts'))", LargeObjects},
		{"SELECT loread(lo_open(1, 262144), 10)", LargeObjects},
		{"ALTER LARGE OBJECT 1 OWNER TO bob", LargeObjects},
		{"COMMENT ON LARGE OBJECT 1 IS 'x'", LargeObjects},
		{"GRANT SELECT ON LARGE OBJECT 1 TO bob", LargeObjects},
		{"SELECT pg_advisory_lock(1)", AdvisoryLocks},
		{"SELECT pg_try_advisory_xact_lock(1, 2)", AdvisoryLocks},
		{"SELECT * FROM t WHERE pg_advisory_xact_lock_shared(id) IS NOT NULL", AdvisoryLocks},
		{"PREPARE p AS SELECT pg_advisory_unlock_all()", AdvisoryLocks},
		{"WITH x AS (SELECT 1) SELECT lo_unlink(1) FROM x", LargeObjects},
		{"SELECT pg_catalog.setval('public.t_id_seq', 40, true)", SequenceSet},
		{"SELECT setval('s', 1)", SequenceSet},
		// Not features: ordinary calls, a user's own schema, and names
		// that merely look alike.
		{"SELECT now(), count(*) FROM t", Replicated},
		{"SELECT myschema.pg_advisory_lock(1)", Replicated},
		{"SELECT 'pg_advisory_lock(1)'", Replicated},
		{"SELECT * FROM t FOR UPDATE", Replicated},
		{"GRANT SELECT ON TABLE t TO bob", Replicated},
		// Definitions call nothing yet; CREATE TABLE AS runs its query.
		{"CREATE VIEW v AS SELECT pg_advisory_lock(1)", Replicated},
		{"CREATE FUNCTION f() RETURNS void LANGUAGE sql BEGIN ATOMIC SELECT pg_notify('a', 'b'); END", Replicated},
		{"CREATE TABLE x AS SELECT lo_create(0) AS o", LargeObjects},
		{"SELECT setval('s', 1) INTO TEMP y", SequenceSet},
		{"COPY (SELECT pg_advisory_lock(1)) TO STDOUT", AdvisoryLocks},
		{"CALL p(pg_advisory_lock(1))", AdvisoryLocks},
		// The prepared statement exists in one session of one replica.
		{"CREATE TABLE t AS EXECUTE q", PreparedQueryDDL},
		{"CREATE UNLOGGED TABLE t AS EXECUTE q(1)", PreparedQueryDDL},
		{"CREATE TEMP TABLE t AS EXECUTE q(1)", Replicated}, // stays on the replica
		{"CREATE TABLE t AS SELECT 1", Replicated},
		{"PREPARE q AS SELECT 1 AS id INTO public.t", DDLInPreparedStatement},
		{"PREPARE q AS SELECT 1 AS id", Replicated},
		{"PREPARE q AS SELECT 1 AS id INTO TEMP t", Replicated}, // stays on the replica
	}
	for _, c := range cases {
		stmts, err := Classify(c.sql)
		if err != nil || len(stmts) != 1 {
			t.Fatalf("%s: %v %v", c.sql, stmts, err)
		}
		if got := stmts[0].Unreplicated; got != c.want {
			t.Errorf("%s: %v, want %v", c.sql, got, c.want)
		}
	}
}

// BenchmarkUnreplicatedFeature is the cost the feature check adds to an
// uncached classification (the tree walk), on the same queries as
// BenchmarkClassifyUncached.
func BenchmarkUnreplicatedFeature(b *testing.B) {
	var trees []*pg_query.ParseResult
	for _, q := range benchQueries {
		t, err := pg_query.Parse(q)
		if err != nil {
			b.Fatal(err)
		}
		trees = append(trees, t)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, raw := range trees[i%len(trees)].Stmts {
			unreplicatedFeature(raw.Stmt, Read)
		}
	}
}
