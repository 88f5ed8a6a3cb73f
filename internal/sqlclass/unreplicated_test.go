package sqlclass

import "testing"

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
