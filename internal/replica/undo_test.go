package replica

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// undoSchema has the table shapes an undo must restore: a primary key
// with a secondary unique column, a composite key, a foreign key (whose
// checks are off in the undo), a table without a primary key, a
// partitioned table whose rows move between partitions, and a table with
// an inheritor that holds a row of the same key.
const undoSchema = `
CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL, u int UNIQUE, note text);
CREATE TABLE pair (a int, b text, v text, PRIMARY KEY (a, b));
CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES parent);
CREATE TABLE ev (k int, v text);
CREATE TABLE part (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE part_e PARTITION OF part FOR VALUES IN ('e');
CREATE TABLE part_w PARTITION OF part FOR VALUES IN ('w');
CREATE TABLE inh (id int PRIMARY KEY, v text);
CREATE TABLE inh_kid (PRIMARY KEY (id)) INHERITS (inh);
`

// durableTxns are the versions 2..k that stay.
var durableTxns = []string{
	`INSERT INTO acct VALUES (1, 100, 1, 'a'), (2, 200, 2, 'b'), (3, 300, 3, 'c'), (4, 400, 4, 'd');
	 INSERT INTO pair VALUES (1, 'x', 'one'), (2, 'y', 'two');
	 INSERT INTO parent VALUES (1), (2); INSERT INTO child VALUES (10, 1);
	 INSERT INTO part VALUES (1, 'e', 1), (2, 'w', 2)`,
	`INSERT INTO ev VALUES (1, 'x'), (1, 'x'), (2, 'y')`,
	`UPDATE acct SET bal = bal + 1 WHERE id = 1`,
	`INSERT INTO inh VALUES (1, 'parent'); INSERT INTO inh_kid VALUES (1, 'kid')`,
}

// failedTxns are the versions k+1..v that fail: updates, deletes,
// inserts, a row deleted and inserted again in one version and in two, a
// unique value moved from one row to another, equal rows of a table
// without a primary key (one more, one fewer, one changed, one inserted
// and deleted again), a row moved to another partition.
var failedTxns = []string{
	`UPDATE acct SET bal = 0 WHERE id = 1`,
	`DELETE FROM acct WHERE id = 2`,
	`INSERT INTO acct VALUES (5, 500, 5, 'new')`,
	`DELETE FROM acct WHERE id = 3; INSERT INTO acct VALUES (3, 333, 33, 'again')`,
	`DELETE FROM acct WHERE id = 4`,
	`INSERT INTO acct VALUES (4, 444, 4, 'back')`,
	`UPDATE acct SET u = 100 WHERE id = 1`,
	`UPDATE acct SET u = 1 WHERE id = 5`,
	`INSERT INTO pair VALUES (3, 'z', 'three'); UPDATE pair SET v = 'uno' WHERE a = 1; DELETE FROM pair WHERE a = 2`,
	`INSERT INTO parent VALUES (3); INSERT INTO child VALUES (30, 3); DELETE FROM child WHERE id = 10`,
	`INSERT INTO ev VALUES (1, 'x')`,
	`DELETE FROM ev WHERE ctid = (SELECT ctid FROM ev WHERE k = 1 LIMIT 1)`,
	`DELETE FROM ev WHERE ctid = (SELECT ctid FROM ev WHERE k = 1 LIMIT 1)`,
	`UPDATE ev SET v = 'z' WHERE k = 2`,
	`INSERT INTO ev VALUES (3, 'w'); DELETE FROM ev WHERE k = 3`,
	`UPDATE part SET region = 'w' WHERE id = 1`,
	`UPDATE ONLY inh SET v = 'changed' WHERE id = 1`,
}

// undoFixture is a cluster of three servers: A commits every version as
// a client would; B applied versions 1..k, took a pin at k, then applied
// k+1..v, which are to fail; R applied 1..k only and shows what B must
// hold after the rewind.
type undoFixture struct {
	c       *cluster
	a, b, r *node
	pin     *Pin
	k, v    uint64
}

func newUndoFixture(t *testing.T, opts ...pgtest.Option) *undoFixture {
	t.Helper()
	f := &undoFixture{c: newCluster(t, 3, opts...)}
	f.a, f.b, f.r = f.c.nodes[0], f.c.nodes[1], f.c.nodes[2]
	f.c.commit(0, undoSchema)
	for _, sql := range durableTxns {
		f.c.commit(0, sql)
	}
	f.k = uint64(len(f.c.log))
	f.c.catchUp(1)
	f.c.catchUp(2)
	var err error
	if f.pin, err = TakePin(tctx(t), f.b.connect(t), time.Now()); err != nil {
		t.Fatal(err)
	}
	if f.pin.Version != f.k {
		t.Fatalf("pin at version %d, want %d", f.pin.Version, f.k)
	}
	for _, sql := range failedTxns {
		f.c.commit(0, sql)
	}
	f.v = uint64(len(f.c.log))
	// In two runs, as the agent's batches apply them.
	half := int(f.k) + len(failedTxns)/2
	if err := f.b.applier.Apply(tctx(t), f.b.apply, f.c.log[f.k:half]); err != nil {
		t.Fatal(err)
	}
	f.c.catchUp(1)
	// The history the agent recorded: a run of epoch 1, and one of epoch 2
	// that began with the first failed version.
	f.c.local(1, fmt.Sprintf(`INSERT INTO tashkent.history VALUES (1, 1), (%d, 2)`, f.k+1))
	sameChecksums(t, checksum(t, f.a.connect(t)), checksum(t, f.b.apply))
	return f
}

// failed returns the entries of the failed versions, k+1..v.
func (f *undoFixture) failed() []*certifierpb.LogEntry { return f.c.log[f.k:f.v] }

// checkRewound checks that B holds exactly what R holds, at version k,
// with no history above k and no rewind pending.
func (f *undoFixture) checkRewound(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	sameChecksums(t, checksum(t, f.r.connect(t)), checksum(t, conn))
	if t.Failed() {
		for _, tbl := range []string{"acct", "pair", "parent", "child", "ev", "part_e", "part_w", "inh", "inh_kid"} {
			t.Logf("%s on R:\n%s\non B:\n%s", tbl, dump(t, f.r.connect(t), tbl), dump(t, conn, tbl))
		}
	}
	if v, err := ReadVersion(tctx(t), conn); err != nil || v != f.k {
		t.Errorf("B's version after the rewind: %d, %v; want %d", v, err, f.k)
	}
	if got := strings.Join(queryStrings(t, conn, `SELECT first_version || ':' || epoch FROM tashkent.history ORDER BY 1`), " "); got != "1:1" {
		t.Errorf("B's history after the rewind: %q, want 1:1", got)
	}
	if n := queryStrings(t, conn, `SELECT count(*)::text FROM tashkent.rewind`); n[0] != "0" {
		t.Errorf("%s rewind markers left", n[0])
	}
	if fl := queryStrings(t, conn, `SELECT floor::text FROM tashkent.status()`); fl[0] != fmt.Sprint(f.k) {
		t.Errorf("floor %s, want %d", fl[0], f.k)
	}
	// What a restart reads the version back from.
	if p := originProgress(t, conn); p != f.k {
		t.Errorf("the replication origin's progress: %d, want %d", p, f.k)
	}
}

// goesOn checks that the rewound B applies other versions k+1.. (R's
// commits, which reuse the failed versions' numbers), commits its own
// clients' transactions after them, and ends equal to R.
func (f *undoFixture) goesOn(t *testing.T) {
	t.Helper()
	pin, err := TakePin(tctx(t), f.b.connect(t), time.Now())
	if err != nil || pin.Version != f.k {
		t.Fatalf("a pin taken after the rewind: %v, %v; want one at version %d", pin, err, f.k)
	}
	f.c.log = f.c.log[:f.k]
	f.c.commit(2, `UPDATE acct SET bal = 7 WHERE id = 2; INSERT INTO ev VALUES (9, 'n')`)
	f.c.commit(2, `INSERT INTO acct VALUES (5, 55, 55, 'other'); DELETE FROM ev WHERE k = 2`)
	apply := f.b.apply
	if err := NewApplier().Apply(tctx(t), apply, f.c.log[f.k:]); err != nil {
		t.Fatalf("B applies the new versions %d..%d: %v", f.k+1, len(f.c.log), err)
	}
	session := f.b.connect(t)
	f.c.commitOn(1, session, `UPDATE acct SET note = 'local' WHERE id = 1`)
	f.c.catchUp(2)
	sameChecksums(t, checksum(t, f.r.connect(t)), checksum(t, apply))
	if v, err := ReadVersion(tctx(t), apply); err != nil || v != uint64(len(f.c.log)) {
		t.Errorf("B's version: %d, %v; want %d", v, err, len(f.c.log))
	}
}

// A replica that applied versions that then failed goes back to the
// version of its pin: every key the failed versions wrote gets its row
// at the pin's version back (or none), the rows of the table without a
// primary key are those it had, the history runs above the pin go, and
// the replica's version is the pin's (Eventual Durability §2.2.1: a
// failed transaction stops being visible; Def. 2.2.1: the committed
// projection is what remains). It then applies other versions with the
// same numbers, and commits its own.
func TestUndoTakesTheReplicaBackToThePin(t *testing.T) {
	f := newUndoFixture(t)
	ctx := tctx(t)
	if err := f.b.applier.Undo(ctx, f.b.apply, f.pin, f.failed()); err != nil {
		t.Fatal(err)
	}
	// The rows are at k: so is the version sessions see and wait on,
	// although the origin's progress is still v.
	if v, _ := ReadVersion(ctx, f.b.apply); v != f.k {
		t.Errorf("after the undo, before the finish: version %d, want %d", v, f.k)
	}
	if p := originProgress(t, f.b.apply); p != f.v {
		t.Errorf("after the undo, before the finish: the origin's progress %d, want %d", p, f.v)
	}
	from, err := FinishRewind(ctx, f.b.apply, f.k)
	if err != nil || from != f.v {
		t.Fatalf("FinishRewind: %d, %v; want from %d", from, err, f.v)
	}
	f.checkRewound(t, f.b.apply)
	f.goesOn(t)
}

// The rewind runs only while no other backend is in the commit order:
// rewind_begin refuses (55006) while a client's transaction waits for its
// certification, and nothing changes; between the undo and the finish, no
// version is applied and a certified local commit waits, and the finish
// refuses while it does.
func TestRewindRefusedWhileABackendIsInTheCommitOrder(t *testing.T) {
	f := newUndoFixture(t)
	ctx := tctx(t)
	if err := f.b.applier.Undo(ctx, f.b.apply, f.pin, f.failed()[1:]); err == nil || !strings.Contains(err.Error(), "the entries start at version") {
		t.Fatalf("undo of versions %d..%d through the pin at %d: %v; want refused (version %d would stay)", f.k+2, f.v, f.k, err, f.k+1)
	}
	release := make(chan struct{})
	f.b.agent.SetDecide(func(r agenttest.Request, next uint64) wire.Decision {
		<-release
		return wire.Decision{Kind: wire.Abort, Detail: "refused by the test"}
	})
	certifying := asyncExec(f.b.connect(t), `INSERT INTO acct VALUES (99, 9, 99, 'x')`)
	awaitBackendState(t, f.b.apply, "certifying")
	err := f.b.applier.Undo(ctx, f.b.apply, f.pin, f.failed())
	if pgcode.Of(err) != pgcode.ObjectInUse || !strings.Contains(err.Error(), "waiting for its certification") {
		t.Fatalf("undo while a backend waits for its certification: %v, want 55006", err)
	}
	close(release)
	if err := <-certifying; pgcode.Of(err) != pgcode.SerializationFailure {
		t.Fatalf("the certifying transaction: %v, want its abort", err)
	}
	sameChecksums(t, checksum(t, f.a.connect(t)), checksum(t, f.b.apply))
	if v, _ := ReadVersion(ctx, f.b.apply); v != f.v {
		t.Fatalf("after the refused undo: version %d, want %d", v, f.v)
	}

	if err := f.b.applier.Undo(ctx, f.b.apply, f.pin, f.failed()); err != nil {
		t.Fatal(err)
	}
	next := &certifierpb.LogEntry{Version: f.v + 1, Writeset: &certifierpb.Writeset{}}
	if err := NewApplier().Apply(ctx, f.b.applierConn(t), []*certifierpb.LogEntry{next}); err == nil || !strings.Contains(err.Error(), "being rewound") {
		t.Fatalf("apply between the undo and the finish: %v, want refused", err)
	}
	f.b.agent.SetDecide(func(r agenttest.Request, next uint64) wire.Decision {
		return wire.Decision{Kind: wire.Commit, Version: f.v + 1}
	})
	local := f.b.connect(t)
	holding := asyncExec(local, `INSERT INTO acct VALUES (98, 8, 98, 'y')`)
	awaitBackendState(t, f.b.apply, "holding")
	if _, err := FinishRewind(ctx, f.b.apply, f.k); pgcode.Of(err) != pgcode.ObjectInUse || !strings.Contains(err.Error(), "waiting for its commit turn") {
		t.Fatalf("finish while a backend holds a version: %v, want 55006", err)
	}
	mustExec(t, f.b.apply, fmt.Sprintf(`SELECT pg_terminate_backend(%d)`, local.PgConn().PID()))
	if err := <-holding; err == nil {
		t.Fatal("the terminated backend committed")
	}
	awaitNoBackendIn(t, f.b.apply, int32(local.PgConn().PID()))
	if _, err := FinishRewind(ctx, f.b.apply, f.k); err != nil {
		t.Fatal(err)
	}
	f.checkRewound(t, f.b.apply)
}

// A crash between the undo's commit and the finish leaves the marker, and
// a finish that rolled back (its origin and shared state set back, its
// marker deletion not) leaves it too: the agent's ResumeRewind, from a
// fresh connection after the server restarted, ends in the same state as
// an uninterrupted rewind, and the replica goes on. The undo commits
// with synchronous_commit on whatever the session's setting: the WAL
// writer, which flushes an asynchronous commit, waits ten seconds here.
func TestRewindMarkerSurvivesACrashBetweenUndoAndFinish(t *testing.T) {
	f := newUndoFixture(t, pgtest.WithSettings(map[string]string{"tashkent.recovery_roles": "postgres", "wal_writer_delay": "10s"}))
	ctx := tctx(t)
	mustExec(t, f.b.apply, `SET synchronous_commit = off`)
	if err := f.b.applier.Undo(ctx, f.b.apply, f.pin, f.failed()); err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.b.connect(t), fmt.Sprintf(`BEGIN; SELECT tashkent.rewind_finish(%d); ROLLBACK`, f.k))
	next := &certifierpb.LogEntry{Version: f.k + 1, Writeset: &certifierpb.Writeset{}}
	if err := NewApplier().Apply(ctx, f.b.applierConn(t), []*certifierpb.LogEntry{next}); err == nil || !strings.Contains(err.Error(), "being rewound") {
		t.Fatalf("apply after a finish that rolled back: %v, want refused", err)
	}
	if err := f.b.srv.Kill9(); err != nil {
		t.Fatal(err)
	}
	if err := f.b.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn := f.b.connect(t)
	if n := queryStrings(t, conn, `SELECT count(*)::text FROM tashkent.rewind`); n[0] != "1" {
		t.Fatalf("%s rewind markers after the crash, want 1", n[0])
	}
	k, resumed, err := ResumeRewind(ctx, conn)
	if err != nil || !resumed || k != f.k {
		t.Fatalf("ResumeRewind: %d, %v, %v; want %d, resumed", k, resumed, err, f.k)
	}
	f.checkRewound(t, conn)
	if _, resumed, err := ResumeRewind(ctx, conn); err != nil || resumed {
		t.Fatalf("ResumeRewind again: %v, %v; want nothing to resume", resumed, err)
	}
	f.b.apply = f.b.applierConn(t)
	f.goesOn(t)
	if err := f.b.srv.Kill9(); err != nil {
		t.Fatal(err)
	}
	if err := f.b.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := ReadVersion(ctx, f.b.connect(t)); err != nil || v != uint64(len(f.c.log)) {
		t.Errorf("B's version after another crash: %d, %v; want %d", v, err, len(f.c.log))
	}
}

// asyncExec runs sql on conn in a goroutine and delivers its error.
func asyncExec(conn *pgx.Conn, sql string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), sql)
		done <- err
	}()
	return done
}

// awaitBackendState waits until some backend is in state (tashkent.backends()).
func awaitBackendState(t *testing.T, admin *pgx.Conn, state string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var n int
		if err := admin.QueryRow(tctx(t), `SELECT count(*) FROM tashkent.backends() WHERE state = $1`, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no backend became %s", state)
}

// awaitNoBackendIn waits until backend pid has left the commit order.
func awaitNoBackendIn(t *testing.T, admin *pgx.Conn, pid int32) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var n int
		if err := admin.QueryRow(tctx(t), `SELECT count(*) FROM tashkent.backends() WHERE pid = $1 AND state <> 'idle'`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("backend %d stays in the commit order", pid)
}
