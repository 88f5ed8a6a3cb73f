package proxy

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// A read that calls a function PostgreSQL does not have built in may
// write, so the proxy runs it as a write (usercode.go); reads that call
// only built-ins are left alone.
func TestReadsThatCallUserFunctionsRunAsWrites(t *testing.T) {
	r := &replication{builtinFunctions: map[string]bool{
		"count": true, "now": true, "lower": true, "pg_catalog.lower": true, "pg_catalog.count": true,
		"information_schema._pg_truetypid": true,
	}}
	for sql, want := range map[string]bool{
		`SELECT count(*), now() FROM t WHERE lower(name) = 'x'`:   false,
		`SELECT pg_catalog.lower('X')`:                            false,
		`SELECT information_schema._pg_truetypid(a, t) FROM a, t`: false,
		`SELECT 1`:                                                        false,
		`SELECT create_account('ann')`:                                    true,
		`SELECT public.lower('X')`:                                        true,
		`SELECT * FROM t WHERE id IN (SELECT next_id())`:                  true,
		`WITH x AS (SELECT audit('read')) SELECT count(*) FROM x`:         true,
		`COPY (SELECT export_rows()) TO STDOUT`:                           true,
		`SELECT "Mixed"()`:                                                true,
		`SELECT "Lower"('X')`:                                             true,
		`EXPLAIN SELECT create_account('ann')`:                            false,
		`EXPLAIN ANALYZE SELECT create_account('ann')`:                    true,
		`SELECT count(*) FROM t GROUP BY lower(name) HAVING count(*) > 1`: false,
	} {
		stmts, err := sqlclass.Classify(sql)
		if err != nil || len(stmts) != 1 {
			t.Fatalf("%s: %v", sql, err)
		}
		if got := r.runsUserCode(stmts[0]); got != want {
			t.Errorf("%s: runs user code %v, want %v (functions %q)", sql, got, want, stmts[0].Functions)
		}
	}
	var none *replication
	if stmts, _ := sqlclass.Classify(`SELECT f()`); none.runsUserCode(stmts[0]) {
		t.Error("without replication state, a read is a read")
	}
}
