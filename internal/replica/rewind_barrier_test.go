package replica

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// refusedSQL runs sql (statements in one simple query) on conn, wants it
// to fail with code and a message containing want, and rolls back what
// it left open.
func refusedSQL(t *testing.T, conn *pgx.Conn, sql, code, want string) {
	t.Helper()
	_, err := conn.PgConn().Exec(tctx(t), sql).ReadAll()
	if pgcode.Of(err) != code || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("%s: %v; want %s (%q)", sql, err, code, want)
	}
	mustExec(t, conn, `ROLLBACK`)
}

// The extension's side of a rewind, on one server with an empty undo:
// rewind_begin runs only at the top level of a transaction block and
// from the replica's version; from its commit to the finish's, the
// replica counts its version as the target (committed_version, waits)
// and refuses snapshot_version; rewind_finish runs neither in a
// subtransaction (a rollback to the savepoint would keep the marker and
// leave the origin and shared state set back) nor in a prepared
// transaction; after a restart the marker alone refuses apply_versions;
// the finish accepts only the two versions the replica can hold then
// (the target, the version it went back from).
func TestRewindBarriersAndTheVersionWhileRewinding(t *testing.T) {
	c := newCluster(t, 1, pgtest.WithSettings(map[string]string{"tashkent.recovery_roles": "postgres"}))
	nd := c.nodes[0]
	ctx := tctx(t)
	c.commit(0, undoSchema)
	for _, sql := range durableTxns {
		c.commit(0, sql)
	}
	v := c.version(0)
	k := v - 2
	apply := nd.apply
	begin := fmt.Sprintf(`SELECT tashkent.rewind_begin(%d, %d)`, k, v)
	finish := fmt.Sprintf(`SELECT tashkent.rewind_finish(%d)`, k)

	refusedSQL(t, apply, begin, pgcode.NoActiveSQLTransaction, "transaction blocks")
	refusedSQL(t, apply, `BEGIN; SAVEPOINT s; `+begin, pgcode.ActiveSQLTransaction, "subtransaction")
	refusedSQL(t, apply, fmt.Sprintf(`BEGIN; SELECT tashkent.rewind_begin(%d, %d)`, k, v-1), pgcode.ObjectNotInPrerequisiteState,
		fmt.Sprintf("cannot rewind from version %d: the replica's version is %d", v-1, v))
	mustExec(t, apply, `BEGIN; `+begin+`; COMMIT`)

	session := nd.connect(t)
	if got, err := ReadVersion(ctx, session); err != nil || got != k {
		t.Errorf("committed_version() between the undo and the finish: %d, %v; want the target %d", got, err, k)
	}
	refusedSQL(t, session, fmt.Sprintf(`SELECT tashkent.wait_for_version(%d, 50)`, k+1), pgcode.VersionWaitTimedOut, "not applied")
	refusedSQL(t, session, `SELECT tashkent.snapshot_version()`, pgcode.ObjectNotInPrerequisiteState, "being rewound")

	refusedSQL(t, apply, `BEGIN; SAVEPOINT s; `+finish, pgcode.ActiveSQLTransaction, "subtransaction")
	refusedSQL(t, apply, `DO $$BEGIN PERFORM tashkent.rewind_finish(`+fmt.Sprint(k)+`); EXCEPTION WHEN division_by_zero THEN NULL; END$$`,
		pgcode.ActiveSQLTransaction, "subtransaction")
	refusedSQL(t, apply, `BEGIN; `+finish+`; PREPARE TRANSACTION 'finish'`, pgcode.FeatureNotSupported, "PREPARE TRANSACTION")

	if err := nd.srv.Kill9(); err != nil {
		t.Fatal(err)
	}
	if err := nd.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	apply = nd.applierConn(t)
	// The origin's progress: k if the WAL of the refused finish reached
	// the disk before the crash, v if not. The next version would commit
	// on top, and the finish set the version back under it.
	held := originProgress(t, apply)
	if held != k && held != v {
		t.Fatalf("the origin's progress after the restart: %d, want %d or %d", held, k, v)
	}
	onTop := []*certifierpb.LogEntry{{Version: held + 1, Writeset: &certifierpb.Writeset{}}}
	if err := NewApplier().Apply(ctx, apply, onTop); pgcode.Of(err) != pgcode.ObjectNotInPrerequisiteState || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("apply of version %d after a restart with the marker left: %v; want refused", held+1, err)
	}

	for _, m := range []struct{ target, from uint64 }{{held - 1, held + 1}, {held - 2, held - 1}} {
		c.local(0, fmt.Sprintf(`UPDATE tashkent.rewind SET target_version = %d, from_version = %d`, m.target, m.from))
		if _, err := FinishRewind(ctx, apply, m.target); pgcode.Of(err) != pgcode.ObjectNotInPrerequisiteState ||
			!strings.Contains(err.Error(), "cannot finish the rewind") {
			t.Errorf("finish of a rewind from %d to %d at version %d: %v; want refused", m.from, m.target, held, err)
		}
	}
	c.local(0, fmt.Sprintf(`UPDATE tashkent.rewind SET target_version = %d, from_version = %d`, k, v))
	if got, resumed, err := ResumeRewind(ctx, apply); err != nil || !resumed || got != k {
		t.Fatalf("ResumeRewind: %d, %v, %v; want %d, resumed", got, resumed, err, k)
	}
	next := []*certifierpb.LogEntry{{Version: k + 1, Writeset: &certifierpb.Writeset{}}}
	if err := NewApplier().Apply(ctx, apply, next); err != nil {
		t.Fatalf("apply of version %d after the finish: %v", k+1, err)
	}
	if got, err := ReadVersion(ctx, apply); err != nil || got != k+1 {
		t.Errorf("version %d, %v; want %d", got, err, k+1)
	}
}
