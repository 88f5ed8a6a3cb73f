package sqlclass

import (
	"slices"
	"testing"
)

func TestDDLRelationsNamedWithoutASchema(t *testing.T) {
	cases := map[string][]string{
		"CREATE INDEX ON tmp (v)":                                   {"tmp"},
		"CREATE INDEX ON public.tmp (v)":                            nil,
		`ALTER TABLE "Tmp" ADD COLUMN w int`:                        {"Tmp"},
		"ALTER TABLE pg_temp.tmp ADD COLUMN w int":                  nil,
		"DROP TABLE tmp, public.other, tmp2":                        nil, // names a permanent relation: replicated
		"DROP TABLE tmp, pg_temp.other, tmp2":                       {"tmp", "tmp2"},
		"DROP INDEX IF EXISTS tmp_v":                                {"tmp_v"},
		"DROP FUNCTION f()":                                         nil,
		"ALTER TABLE tmp RENAME TO tmp3":                            {"tmp"},
		"ALTER SEQUENCE s RESTART":                                  {"s"},
		"CREATE TRIGGER t AFTER INSERT ON tmp EXECUTE FUNCTION f()": {"tmp"},
		"COMMENT ON TABLE tmp IS 'x'":                               {"tmp"},
		"COMMENT ON COLUMN tmp.c IS 'x'":                            {"tmp"},
		"COMMENT ON FUNCTION f() IS 'x'":                            nil,
		"CREATE TABLE fresh (id int PRIMARY KEY)":                   nil,
		"CREATE TEMP TABLE fresh (id int)":                          nil,
	}
	for sql, want := range cases {
		stmts, err := Classify(sql)
		if err != nil || len(stmts) != 1 || stmts[0].Kind != DDL {
			t.Fatalf("%s: %v %v", sql, stmts, err)
		}
		if got := stmts[0].Relations; !slices.Equal(got, want) {
			t.Errorf("%s: relations %q, want %q", sql, got, want)
		}
	}
}
