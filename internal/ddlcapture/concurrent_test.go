package ddlcapture_test

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// CONCURRENTLY statements run concurrently where they are issued and are
// captured into their last transaction; the applier runs their blocking
// form inside its apply transaction.
func TestConcurrentlyIsCapturedAndAppliedBlocking(t *testing.T) {
	f := start(t)
	f.exec(f.c, `CREATE TABLE t (id int PRIMARY KEY, v int);
		CREATE TABLE p (id int) PARTITION BY RANGE (id);
		CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10);
		CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (10) TO (20)`)
	f.captured()
	label := scalar[int64](t, f.c, `SELECT tashkent.committed_version()`)
	f.exec(f.c, `CREATE INDEX CONCURRENTLY t_v ON t (v)`)
	reqs := f.certified()
	if len(reqs) != 1 || uint64(label) != reqs[0].StartVersion {
		t.Fatalf("CREATE INDEX CONCURRENTLY: certifications %+v, want one from version %d", reqs, label)
	}
	if got := ddlTexts(reqs[0]); len(got) != 1 || got[0] != `CREATE INDEX CONCURRENTLY t_v ON t (v)` {
		t.Errorf("CREATE INDEX CONCURRENTLY: captured %q", got)
	}
	if !scalar[bool](t, f.c, `SELECT indisvalid FROM pg_index WHERE indexrelid = 't_v'::regclass`) {
		t.Errorf("the index is not valid")
	}
	f.exec(f.c, `DROP INDEX CONCURRENTLY t_v`)
	f.expectCaptured("DROP INDEX CONCURRENTLY", `DROP INDEX CONCURRENTLY t_v`)
	f.exec(f.c, `ALTER TABLE p DETACH PARTITION p2 CONCURRENTLY`)
	f.expectCaptured("DETACH PARTITION CONCURRENTLY", `ALTER TABLE p DETACH PARTITION p2 CONCURRENTLY`)
	f.exec(f.c, `CREATE TEMP TABLE tmp (id int)`)
	f.exec(f.c, `CREATE INDEX CONCURRENTLY ON tmp (id)`)
	f.expectCaptured("CREATE INDEX CONCURRENTLY of a temporary table")

	// Refused by the certifier: the index is left invalid, as after any
	// failed CREATE INDEX CONCURRENTLY.
	f.a.SetDecide(func(r agenttest.Request, next uint64) wire.Decision {
		return wire.Decision{Kind: wire.Abort, AbortReason: 1, Detail: "conflict"}
	})
	f.fail(f.c, `CREATE INDEX CONCURRENTLY t_refused ON t (v)`, pgcode.SerializationFailure)
	if scalar[bool](t, f.c, `SELECT indisvalid FROM pg_index WHERE indexrelid = 't_refused'::regclass`) {
		t.Errorf("an index whose certification failed is valid")
	}
	f.a.SetDecide(func(r agenttest.Request, next uint64) wire.Decision {
		return wire.Decision{Kind: wire.Commit, Version: next}
	})
	f.exec(f.c, `DROP INDEX IF EXISTS t_refused`)
	f.expectCaptured("the refused index and its DROP", `CREATE INDEX CONCURRENTLY t_refused ON t (v)`, `DROP INDEX IF EXISTS t_refused`)

	// The applier: the same texts inside its apply transaction.
	applier := f.a.Connect("postgres")
	f.a.RegisterApplier(applier)
	for _, ddl := range []string{
		`CREATE INDEX CONCURRENTLY a_v ON t (v)`,
		`DROP INDEX CONCURRENTLY a_v`,
		`ALTER TABLE p DETACH PARTITION p1 CONCURRENTLY`,
	} {
		v := scalar[int64](t, f.c, `SELECT tashkent.committed_version()`) + 1
		f.exec(applier, `BEGIN; SELECT tashkent.apply_versions(`+itoa(v)+`, `+itoa(v)+`); `+ddl+`; COMMIT`)
		if got := scalar[int64](t, f.c, `SELECT tashkent.committed_version()`); got != v {
			t.Errorf("%s: the replica's version is %d after the apply, want %d", ddl, got, v)
		}
		f.a.SetNext(uint64(v) + 1)
	}
	f.expectCaptured("the applier's DDL")
	if scalar[bool](t, f.c, `SELECT to_regclass('a_v') IS NOT NULL OR EXISTS (SELECT FROM pg_inherits WHERE inhrelid = 'p1'::regclass)`) {
		t.Errorf("the applier's statements did not all take effect")
	}
}
