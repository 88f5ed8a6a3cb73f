package capture_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// auditedKeys is a table whose rows' updates another AFTER ROW trigger
// records in a replicated table; that trigger's name sorts before
// tashkent's, so its statements are captured between the updated rows'
// changes, under later command ids (stream.c).
var auditedKeys = []string{
	`CREATE TABLE k (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)`,
	`CREATE TABLE audit (n serial PRIMARY KEY, id int)`,
	`CREATE FUNCTION audit_it() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO audit (id) VALUES (NEW.id); RETURN NULL; END $$`,
	`CREATE TRIGGER a_audit AFTER UPDATE ON k FOR EACH ROW EXECUTE FUNCTION audit_it()`,
}

// loadK fills k past the tests' stream threshold.
const loadK = `INSERT INTO k SELECT g, repeat('k', 300) FROM generate_series(1, 300) AS g`

// inStreamedTx begins a transaction on f's connection, rolled back when
// the test ends, and runs load in it.
func inStreamedTx(t *testing.T, f *fixture, load string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := f.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, load); err != nil {
		t.Fatalf("%s: %v", load, err)
	}
	return tx
}

// appliedLikeOrigin applies a collapsed writeset on a new server with
// schema and compares query's result there with f's.
func appliedLikeOrigin(t *testing.T, f *fixture, writeset []byte, query string, schema ...string) {
	t.Helper()
	var ws pb.Writeset
	if err := proto.Unmarshal(writeset, &ws); err != nil {
		t.Fatal(err)
	}
	b := applyTarget(t, schema...)
	applyAll(t, b, []*pb.LogEntry{{Version: 1, Writeset: &ws}})
	if here, there := f.query(f.conn, query)[0], f.query(b, query)[0]; here != there {
		t.Errorf("after apply: %s there, %s here", there, here)
	}
}

const keysAndAudit = `SELECT (SELECT count(*) || ' rows: ' || min(id) || '..' || max(id) || ' ' || sum(length(v)) FROM k) || ' / ' ||
	(SELECT count(*) || ' audited: ' || sum(id) FROM audit)`

// An UPDATE that moves keys onto each other (a deferrable primary key)
// fires delete i, upsert i+1 for each row; every delete must come before
// every upsert, which the audit trigger's statements, captured between
// the rows' changes, prevent in a stream: the statement is refused with
// 0A000 rather than streamed in an order that would lose keys elsewhere.
func TestStreamedKeyMoveWithInterleavedTriggerIsRefused(t *testing.T) {
	f, sa := startStreamed(t, auditedKeys...)
	sa.mu.Lock()
	certified, streamed := len(sa.certify), len(sa.streams)
	sa.mu.Unlock()
	tx := inStreamedTx(t, f, loadK)
	_, err := tx.Exec(context.Background(), `UPDATE k SET id = id + 1`)
	if pgcode.Of(err) != pgcode.FeatureNotSupported || !strings.Contains(err.Error(), "cannot order this statement's delete from table public.k") {
		t.Fatalf("the key move of a streamed transaction with an interleaved trigger: %v, want 0A000", err)
	}
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if len(sa.streams) != streamed || len(sa.certify) != certified {
		t.Fatalf("a refused transaction sent %d writesets and %d streamed ones", len(sa.certify)-certified, len(sa.streams)-streamed)
	}
}

// The audit trigger's statements interleaved with an UPDATE that keeps
// its keys: streamed, and applied elsewhere to the same rows.
func TestStreamedUpdateWithInterleavedTriggerApplies(t *testing.T) {
	f, sa := startStreamed(t, auditedKeys...)
	c, ss := sa.sent(f, `BEGIN; INSERT INTO k SELECT g, repeat('k', 300) FROM generate_series(1, 300) AS g; `+
		`UPDATE k SET v = repeat('u', id); DELETE FROM k WHERE id % 7 = 0; UPDATE k SET v = 'again' WHERE id % 5 = 0; COMMIT`)
	if len(c) != 0 || len(ss) != 1 {
		t.Fatalf("sent %d writesets and %d streamed ones, want 1 streamed", len(c), len(ss))
	}
	var entries []*pb.LogEntry
	for _, ws := range decodeFragments(t, ss[0]) {
		entries = append(entries, &pb.LogEntry{Version: uint64(len(entries) + 1), Writeset: ws})
	}
	b := applyTarget(t, auditedKeys...)
	applyAll(t, b, entries)
	if here, there := f.query(f.conn, keysAndAudit)[0], f.query(b, keysAndAudit)[0]; here != there {
		t.Errorf("after apply: %s there, %s here", there, here)
	}
}

// The same statement below the threshold: one collapsed writeset.
func TestCollapsedKeyMoveWithInterleavedTrigger(t *testing.T) {
	schema := auditedKeys
	f, sa := startStreamed(t, schema...)
	c, ss := sa.sent(f, `BEGIN; INSERT INTO k SELECT g, 'k' FROM generate_series(1, 20) AS g; UPDATE k SET id = id + 1; COMMIT`)
	if len(c) != 1 || len(ss) != 0 {
		t.Fatalf("sent %d writesets and %d streamed ones, want 1 writeset", len(c), len(ss))
	}
	appliedLikeOrigin(t, f, c[0], keysAndAudit, schema...)
}
