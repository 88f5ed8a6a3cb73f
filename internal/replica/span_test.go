package replica

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

// asSpan makes entries, consecutive versions each a transaction of its
// own at the origin, the fragments of one span: a streamed transaction
// whose writeset is their changes, in order.
func asSpan(entries []*certifierpb.LogEntry) []*certifierpb.LogEntry {
	first, last := entries[0].GetVersion(), entries[len(entries)-1].GetVersion()
	out := make([]*certifierpb.LogEntry, len(entries))
	for i, e := range entries {
		out[i] = &certifierpb.LogEntry{Version: e.GetVersion(), Writeset: e.GetWriteset(), SpanFirst: first, SpanLast: last}
	}
	return out
}

// commitEach commits each statement on node 0 as a transaction of its own
// and returns their entries.
func (c *cluster) commitEach(stmts ...string) []*certifierpb.LogEntry {
	c.t.Helper()
	var out []*certifierpb.LogEntry
	for _, s := range stmts {
		out = append(out, c.commit(0, s)...)
	}
	return out
}

// originProgress is the version the replica's commits recorded in the
// replication origin "tashkent", which crash recovery restores
// (extension/src/turn.c).
func originProgress(t testing.TB, conn *pgx.Conn) uint64 {
	t.Helper()
	var v int64
	err := conn.QueryRow(tctx(t), `SELECT (pg_replication_origin_progress('tashkent', false) - '0/0'::pg_lsn)::bigint`).Scan(&v)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(v)
}

// A span is applied fragment by fragment, each call as the agent makes
// it, in one transaction: nothing of it shows, and the replica's version
// stays before it, until the call holding its last version commits it;
// then the replica holds what the origin holds. Its fragments delete a key and insert it again later,
// change a table without a primary key, truncate in the middle, and run
// DDL whose column a later fragment fills.
func TestApplySpanIsOneTransaction(t *testing.T) {
	c, a, b := newPair(t, `CREATE TABLE kv (k int PRIMARY KEY, v text); CREATE TABLE bag (n int, s text)`)
	fragments := asSpan(c.commitEach(
		`INSERT INTO kv VALUES (1, 'a'), (2, 'b'), (3, 'c'); INSERT INTO bag VALUES (1, 'x'), (1, 'x'), (2, 'y')`,
		`DELETE FROM kv WHERE k = 2; UPDATE kv SET v = 'a2' WHERE k = 1;
			DELETE FROM bag WHERE ctid = (SELECT ctid FROM bag WHERE n = 1 LIMIT 1)`,
		`INSERT INTO kv VALUES (2, 'b2'); TRUNCATE bag; INSERT INTO bag VALUES (3, 'z'), (3, 'z')`,
		`ALTER TABLE kv ADD COLUMN w int NOT NULL DEFAULT 0`,
		`INSERT INTO kv VALUES (4, 'd', 7); UPDATE kv SET w = 1 WHERE k = 1; DELETE FROM bag WHERE ctid = (SELECT ctid FROM bag LIMIT 1)`,
	))
	first, last := fragments[0].GetVersion(), fragments[len(fragments)-1].GetVersion()
	watcher := b.connect(t)
	ap := NewApplier()
	for i, f := range fragments {
		if err := ap.ApplySpan(tctx(t), b.apply, []*certifierpb.LogEntry{f}); err != nil {
			t.Fatalf("fragment %d (version %d): %v", i, f.GetVersion(), err)
		}
		if i == len(fragments)-1 {
			break
		}
		if v, err := ReadVersion(tctx(t), watcher); err != nil || v != first-1 {
			t.Fatalf("after fragment %d the replica's version is %d (%v), want %d until the span commits", i, v, err, first-1)
		}
		if v := originProgress(t, watcher); v != first-1 {
			t.Fatalf("after fragment %d the replication origin's progress is %d, want %d", i, v, first-1)
		}
		if f.GetVersion() < first+3 { // the DDL holds kv's lock from there on
			if got := dump(t, watcher, "kv"); got != "" {
				t.Fatalf("after fragment %d another session sees kv:\n%s", i, got)
			}
		}
	}
	if v := c.version(1); v != last {
		t.Fatalf("after the span the replica's version is %d, want %d", v, last)
	}
	if v := originProgress(t, watcher); v != last {
		t.Fatalf("after the span the replication origin's progress is %d, want %d", v, last)
	}
	if st := b.apply.PgConn().TxStatus(); st != 'I' {
		t.Fatalf("connection status after the span: %q", st)
	}
	sameChecksums(t, checksum(t, a.connect(t)), checksum(t, watcher))
	if got := dump(t, watcher, "kv"); got != "(1,a2,1)\n(2,b2,0)\n(3,c,0)\n(4,d,7)" {
		t.Errorf("kv on B:\n%s", got)
	}
	if got := dump(t, watcher, "bag"); got != "(3,z)" {
		t.Errorf("bag on B:\n%s", got)
	}
}

// A span left unfinished (its connection closed, as when the agent's run
// ends) leaves nothing behind, and is applied again whole from its first
// fragment. A fragment that fails inside the span undoes only itself;
// a fragment of a span whose transaction is not open is refused as lost.
func TestApplySpanInterruptedLeavesNothing(t *testing.T) {
	c, a, b := newPair(t, `CREATE TABLE kv (k int PRIMARY KEY, v text); CREATE TABLE bag (n int, s text)`)
	c.commit(0, `INSERT INTO kv VALUES (1, 'before')`)
	c.catchUp(1)
	before := c.version(1)
	fragments := asSpan(c.commitEach(
		`INSERT INTO kv VALUES (2, 'b'); INSERT INTO bag VALUES (1, 'x')`,
		`DELETE FROM kv WHERE k = 1; TRUNCATE bag`,
		`INSERT INTO kv VALUES (1, 'after')`,
	))
	ctx := tctx(t)
	conn := b.applierConn(t)
	ap := NewApplier()
	if err := ap.ApplySpan(ctx, conn, fragments[:1]); err != nil {
		t.Fatal(err)
	}
	bad := &certifierpb.LogEntry{Version: fragments[1].GetVersion(), SpanFirst: fragments[1].GetSpanFirst(), SpanLast: fragments[1].GetSpanLast(),
		Writeset: &certifierpb.Writeset{Changes: []*certifierpb.Change{{Table: "public.missing", Op: certifierpb.Op_OP_UPSERT, Key: []byte("[1]"), Row: []byte("(1)")}}}}
	err := ap.ApplySpan(ctx, conn, []*certifierpb.LogEntry{bad})
	if err == nil || IsSpanLost(err) || !strings.Contains(err.Error(), "public.missing does not exist") {
		t.Fatalf("a failed fragment: %v; want its own error, the span's transaction kept", err)
	}
	if err := ap.ApplySpan(ctx, conn, fragments[1:2]); err != nil {
		t.Fatalf("the fragment again after a failure: %v", err)
	}
	conn.Close(context.Background()) // the run ends mid-span
	watcher := b.connect(t)
	if v := c.version(1); v != before {
		t.Fatalf("after an unfinished span the replica's version is %d, want %d", v, before)
	}
	if got := dump(t, watcher, "kv"); got != "(1,before)" {
		t.Fatalf("kv after an unfinished span:\n%s", got)
	}
	if got := dump(t, watcher, "bag"); got != "" {
		t.Fatalf("bag after an unfinished span:\n%s", got)
	}

	again := b.applierConn(t)
	if err := ap.ApplySpan(ctx, again, fragments[1:2]); !IsSpanLost(err) {
		t.Fatalf("a fragment without its span's transaction: %v, want the span lost", err)
	}
	for _, f := range fragments {
		if err := ap.ApplySpan(ctx, again, []*certifierpb.LogEntry{f}); err != nil {
			t.Fatalf("the span again, version %d: %v", f.GetVersion(), err)
		}
	}
	if v := c.version(1); v != fragments[len(fragments)-1].GetVersion() {
		t.Fatalf("after the span the replica's version is %d", v)
	}
	sameChecksums(t, checksum(t, a.connect(t)), checksum(t, watcher))
	if got := dump(t, watcher, "kv"); got != "(1,after)\n(2,b)" {
		t.Errorf("kv:\n%s", got)
	}
}

// Apply refuses a span's entries; ApplySpan refuses entries that are not
// one span's.
func TestApplyAndApplySpanKeepToTheirEntries(t *testing.T) {
	ctx := tctx(t)
	ws := &certifierpb.Writeset{}
	if err := Apply(ctx, (*pgx.Conn)(nil), []*certifierpb.LogEntry{{Version: 2, SpanFirst: 2, SpanLast: 3, Writeset: ws}}); err == nil {
		t.Error("Apply took a span's entry")
	}
	for name, es := range map[string][]*certifierpb.LogEntry{
		"no span":        {{Version: 2, Writeset: ws}},
		"two spans":      {{Version: 2, SpanFirst: 2, SpanLast: 2}, {Version: 3, SpanFirst: 3, SpanLast: 4}},
		"outside":        {{Version: 5, SpanFirst: 2, SpanLast: 4}},
		"not in a row":   {{Version: 2, SpanFirst: 2, SpanLast: 4}, {Version: 4, SpanFirst: 2, SpanLast: 4}},
		"nothing at all": nil,
	} {
		if err := NewApplier().ApplySpan(ctx, nil, es); err == nil {
			t.Errorf("%s: ApplySpan took it", name)
		}
	}
}
