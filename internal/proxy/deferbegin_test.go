package proxy

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// Only a BEGIN without options is deferred (deferbegin.go): anything the
// database must see at once (an isolation level, READ ONLY, DEFERRABLE) or
// that the proxy rewrites (SERIALIZABLE) goes to it as before.
func TestIsPlainBegin(t *testing.T) {
	for sql, want := range map[string]bool{
		"BEGIN":                                 true,
		"begin;":                                true,
		"BEGIN WORK":                            true,
		"  begin   transaction ":                true,
		"START TRANSACTION":                     true,
		"BEGIN READ ONLY":                       false,
		"BEGIN READ WRITE":                      false,
		"BEGIN ISOLATION LEVEL SERIALIZABLE":    false,
		"BEGIN ISOLATION LEVEL REPEATABLE READ": false,
		"START TRANSACTION DEFERRABLE":          false,
		"/* tagged */ BEGIN":                    false,
		"COMMIT":                                false,
		"SELECT 1":                              false,
	} {
		stmts, err := sqlclass.Classify(sql)
		if err != nil || len(stmts) != 1 {
			t.Fatalf("%q: %v %v", sql, stmts, err)
		}
		if got := isPlainBegin(stmts[0]); got != want {
			t.Errorf("isPlainBegin(%q) = %v, want %v", sql, got, want)
		}
	}
}
