package capture_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// A streamed transaction of many small statements (a loop of single-row
// INSERTs): the backend's memory stays under the documented bound, not
// one list per statement.
func TestStreamedManyStatementsKeepMemoryBounded(t *testing.T) {
	f, _ := startStreamed(t, `CREATE TABLE k (id int PRIMARY KEY, v text)`)
	ctx := context.Background()
	tx, err := f.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	size := func() int64 {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(total_bytes), 0)::int8 FROM pg_backend_memory_contexts WHERE name = 'tashkent stream'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := tx.Exec(ctx, `INSERT INTO k SELECT g, repeat('k', 300) FROM generate_series(1, 1000) AS g`); err != nil {
		t.Fatal(err)
	}
	before := size()
	if before == 0 {
		t.Fatal("the transaction is not streamed")
	}
	if _, err := tx.Exec(ctx, `DO $$ BEGIN FOR i IN 1001..201000 LOOP INSERT INTO k VALUES (i, 'x'); END LOOP; END $$`); err != nil {
		t.Fatal(err)
	}
	after := size()
	t.Logf("tashkent stream context: %d bytes before, %d after 200000 statements", before, after)
	if after-before > 1<<20 {
		t.Errorf("the stream's memory grew by %d bytes over 200000 single-row statements (%d per statement)", after-before, (after-before)/200000)
	}
}

// A statement refused with 0A000 inside a savepoint: the savepoint's
// rollback undoes it, and the transaction commits what is left.
func TestStreamedRefusedStatementRolledBackToSavepointCommits(t *testing.T) {
	f, sa := startStreamed(t, auditedKeys...)
	ctx := context.Background()
	tx := inStreamedTx(t, f, loadK)
	if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	_, err := tx.Exec(ctx, `UPDATE k SET id = id + 1`)
	if pgcode.Of(err) != pgcode.FeatureNotSupported {
		t.Fatalf("key move: %v, want 0A000", err)
	}
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
		t.Fatal(err)
	}
	sa.mu.Lock()
	streamed := len(sa.streams)
	sa.mu.Unlock()
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after the refused statement was rolled back to its savepoint: %v", err)
	}
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if len(sa.streams) != streamed+1 {
		t.Errorf("sent %d streamed writesets, want 1", len(sa.streams)-streamed)
	}
}

// The refusal's hint says to rename the trigger so that it sorts after
// tashkent_capture; a trigger that sorts after it splits the run just the
// same, and the statement is refused just the same.
func TestStreamedRefusalHintForTriggerSortingAfterCapture(t *testing.T) {
	schema := append([]string{}, auditedKeys[:3]...)
	schema = append(schema, `CREATE TRIGGER zz_audit AFTER UPDATE ON k FOR EACH ROW EXECUTE FUNCTION audit_it()`)
	f, _ := startStreamed(t, schema...)
	ctx := context.Background()
	tx := inStreamedTx(t, f, loadK)
	_, err := tx.Exec(ctx, `UPDATE k SET id = id + 1`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("key move with a trigger sorting after tashkent_capture: %v (not refused)", err)
	}
	t.Logf("refused: %s / %s", pe.Message, pe.Hint)
	if strings.Contains(pe.Hint, "rename the trigger so that it sorts after tashkent_capture") {
		t.Errorf("a trigger named zz_audit (it sorts after tashkent_capture) is refused with the hint to rename it so: %s / %s", pe.Message, pe.Hint)
	}
}

// Bulk INSERT (no deletes: nothing to order) whose AFTER ROW trigger runs
// a loop of statements writing a replicated table: it cannot lose keys,
// and must not be refused.
func TestStreamedInsertWithTriggerLoopIsNotRefused(t *testing.T) {
	f, _ := startStreamed(t,
		`CREATE TABLE k (id int PRIMARY KEY, v text)`,
		`CREATE TABLE fan (id int, i int, PRIMARY KEY (id, i))`,
		`CREATE FUNCTION fan_out() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN FOR i IN 1..70 LOOP INSERT INTO fan VALUES (NEW.id, i); END LOOP; RETURN NULL; END $$`,
		`CREATE TRIGGER zz_fan AFTER INSERT ON k FOR EACH ROW EXECUTE FUNCTION fan_out()`)
	inStreamedTx(t, f, loadK) // fails the test if the load is refused
}

// UPDATE of a table without a primary key (its rows are a multiset: the
// applier deletes one row of the text, in any order) with an audit
// trigger: nothing to lose, and must not be refused.
func TestStreamedKeylessUpdateWithTriggerIsNotRefused(t *testing.T) {
	f, _ := startStreamed(t,
		`CREATE TABLE nk (id int, v text)`,
		`CREATE TABLE audit (n serial PRIMARY KEY, id int)`,
		`CREATE FUNCTION audit_it() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO audit (id) VALUES (NEW.id); RETURN NULL; END $$`,
		`CREATE TRIGGER a_audit AFTER UPDATE ON nk FOR EACH ROW EXECUTE FUNCTION audit_it()`)
	ctx := context.Background()
	tx := inStreamedTx(t, f, `INSERT INTO nk SELECT g, repeat('k', 300) FROM generate_series(1, 300) AS g`)
	if _, err := tx.Exec(ctx, `UPDATE nk SET v = 'u' || id`); err != nil {
		t.Fatalf("UPDATE of a keyless table with an audit trigger: %v", err)
	}
}

// A key-moving UPDATE whose rows fire an AFTER ROW trigger that writes
// nothing but has an EXCEPTION block: each call starts a subtransaction,
// which splits the statement's run (tk_stream_mark). Refused, and the
// detail names subtransactions among the causes.
func TestStreamedKeyMoveSplitBySubtransactionsIsRefused(t *testing.T) {
	f, _ := startStreamed(t,
		`CREATE TABLE k (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)`,
		`CREATE FUNCTION guarded() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN BEGIN PERFORM 1; EXCEPTION WHEN OTHERS THEN NULL; END; RETURN NULL; END $$`,
		`CREATE TRIGGER zz_guarded AFTER UPDATE ON k FOR EACH ROW EXECUTE FUNCTION guarded()`)
	ctx := context.Background()
	tx := inStreamedTx(t, f, loadK)
	_, err := tx.Exec(ctx, `UPDATE k SET id = id + 1`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != pgcode.FeatureNotSupported || !strings.Contains(pe.Detail, "subtransactions") {
		t.Fatalf("key move split by subtransactions: %v, want 0A000 whose detail names subtransactions", err)
	}
}

// A DELETE whose rows' AFTER DELETE trigger (sorting before
// tashkent_capture) puts some rows back: each row's re-insert is captured
// before its delete, which the stream cannot place: refused with 0A000
// rather than streamed in an order that deletes the rows put back.
func TestStreamedDeleteWithPutBackTriggerIsRefused(t *testing.T) {
	f, _ := startStreamed(t,
		`CREATE TABLE k (id int PRIMARY KEY, v text)`,
		`CREATE FUNCTION keep_even() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF OLD.id % 2 = 0 THEN INSERT INTO k VALUES (OLD.id, 'kept'); END IF; RETURN NULL; END $$`,
		`CREATE TRIGGER a_keep AFTER DELETE ON k FOR EACH ROW EXECUTE FUNCTION keep_even()`)
	ctx := context.Background()
	tx := inStreamedTx(t, f, loadK)
	_, err := tx.Exec(ctx, `DELETE FROM k`)
	if pgcode.Of(err) != pgcode.FeatureNotSupported || !strings.Contains(err.Error(), "cannot order this statement's delete from table public.k") {
		t.Fatalf("a delete whose trigger puts rows back, streamed: %v, want 0A000", err)
	}
}

// The same below the threshold: collapsed, and applied the same.
func TestCollapsedDeleteWithPutBackTriggerApplies(t *testing.T) {
	schema := []string{
		`CREATE TABLE k (id int PRIMARY KEY, v text)`,
		`CREATE FUNCTION keep_even() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF OLD.id % 2 = 0 THEN INSERT INTO k VALUES (OLD.id, 'kept'); END IF; RETURN NULL; END $$`,
		`CREATE TRIGGER a_keep AFTER DELETE ON k FOR EACH ROW EXECUTE FUNCTION keep_even()`,
	}
	f, sa := startStreamed(t, schema...)
	const rows = `SELECT count(*) || ' rows, ' || coalesce(sum(id), 0) || ' ' || count(*) FILTER (WHERE v = 'kept') || ' kept' FROM k`
	c, ss := sa.sent(f, `BEGIN; INSERT INTO k SELECT g, 'k' FROM generate_series(1, 20) AS g; DELETE FROM k; COMMIT`)
	if len(c) != 1 || len(ss) != 0 {
		t.Fatalf("sent %d writesets and %d streamed ones, want 1 writeset", len(c), len(ss))
	}
	appliedLikeOrigin(t, f, c[0], rows, schema[0])
}

// A doomed backend that is sending its fragments fails with 40001 at once
// (the doom's signal interrupts its wait on the agent's socket), and
// closes the agent connection so that the stage is dropped.
func TestDoomedStreamingBackendFailsAndClosesItsConnection(t *testing.T) {
	f, sa := startStreamed(t, `CREATE TABLE k (id int PRIMARY KEY, v text)`)
	stall, release, broken := make(chan struct{}), make(chan struct{}), make(chan struct{})
	sa.mu.Lock()
	sa.stall, sa.release, sa.broken = stall, release, broken
	sa.mu.Unlock()
	var committed int64
	if err := f.conn.QueryRow(context.Background(), `SELECT tashkent.committed_version()`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	pid := f.conn.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := f.conn.Exec(context.Background(), `INSERT INTO k SELECT g, repeat('c', 1000) FROM generate_series(1, 10000) AS g`)
		done <- err
	}()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	select {
	case <-stall:
	case <-time.After(30 * time.Second):
		t.Fatal("no fragment arrived")
	}
	other := f.agent.Connect("postgres")
	var doomed *string
	if err := other.QueryRow(context.Background(), `SELECT tashkent.doom($1, $2)`, pid, committed+1).Scan(&doomed); err != nil {
		t.Fatal(err)
	}
	if doomed == nil {
		t.Fatal("not doomed")
	}
	select {
	case err := <-done:
		if pgcode.Of(err) != pgcode.SerializationFailure {
			t.Errorf("the doomed streaming transaction ended with %v, want 40001", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the doomed streaming transaction is still sending after 10s")
	}
	close(release)
	released = true
	select {
	case <-broken:
	case <-time.After(10 * time.Second):
		t.Error("the agent connection was not closed: the stage would stay")
	}
}

// An UPDATE of a partitioned table whose one audited row (the last of
// partition 1) splits its run: the streamed part upserted only k1; the
// resumed part upserts k2 and moves one key of k2 (its delete goes first
// within the part): nothing to misorder, but the resumed part's own
// upserts are counted as streamed ones (the two lists are one List).
func TestStreamedResumedPartMovesKeyOfTableOnlyItUpserts(t *testing.T) {
	f, _ := startStreamed(t,
		`CREATE TABLE k (id int, grp int, v text, PRIMARY KEY (id, grp)) PARTITION BY LIST (grp)`,
		`CREATE TABLE k1 PARTITION OF k FOR VALUES IN (1)`,
		`CREATE TABLE k2 PARTITION OF k FOR VALUES IN (2)`,
		`CREATE TABLE audit (n serial PRIMARY KEY, id int)`,
		`CREATE FUNCTION audit_it() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO audit (id) VALUES (NEW.id); RETURN NULL; END $$`,
		`CREATE TRIGGER a_audit AFTER UPDATE ON k FOR EACH ROW WHEN (NEW.v = 'a') EXECUTE FUNCTION audit_it()`)
	ctx := context.Background()
	tx := inStreamedTx(t, f, `INSERT INTO k SELECT g, grp, repeat('k', 300) FROM generate_series(1, 300) AS g, generate_series(1, 2) AS grp ORDER BY grp, g`)
	_, err := tx.Exec(ctx, `UPDATE k SET v = CASE WHEN grp = 1 AND id = 300 THEN 'a' ELSE 'b' END,
		id = CASE WHEN grp = 2 AND id = 300 THEN 1000 ELSE id END`)
	if err != nil {
		t.Errorf("UPDATE whose resumed part moves a key of a partition only it upserts: %v", err)
	}
}
