package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A client's plain BEGIN is answered by the proxy and reaches PostgreSQL
// with the next statement, in the same write (deferbegin.go; issue 3's
// latency work). The client must not be able to tell, except by timing:
// ReadyForQuery says 'T' after BEGIN, the block's snapshot is taken at its
// first statement as in PostgreSQL (Tashkent §6.2: the start_version label
// is read at BEGIN, never newer than the snapshot), its writes are certified
// and replicated at COMMIT, errors in it fail the block, BEGIN then COMMIT
// or ROLLBACK with nothing between works, and BEGIN with options goes to
// the database at once, as before. The database session's state in
// pg_stat_activity shows that the BEGIN was really deferred.
func TestDeferredBeginKeepsTransactionSemantics(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx := context.Background()
	const app = "deferred_begin_test"
	conn := c.connectWith(0, func(cfg *pgx.ConnConfig) { cfg.RuntimeParams["application_name"] = app })
	other := c.connect(0)
	direct := c.direct(0)
	execSQL(t, conn, "CREATE TABLE db (id int PRIMARY KEY, v text)")
	pg := conn.PgConn()

	simple, mustSimple, wantStatus := simpleQueries(t, ctx, pg)
	backendState := func() string {
		t.Helper()
		var state string
		if err := direct.QueryRow(ctx, "SELECT state FROM pg_stat_activity WHERE application_name = $1", app).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state
	}
	count := func(q *pgx.Conn) int {
		t.Helper()
		var n int
		if err := q.QueryRow(ctx, "SELECT count(*) FROM db").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("simple protocol: deferred, then a real block", func(t *testing.T) {
		mustSimple("BEGIN")
		wantStatus('T')
		if s := backendState(); s != "idle" {
			t.Fatalf("database session %q after a plain BEGIN, want idle (deferred)", s)
		}
		execSQL(t, other, "INSERT INTO db VALUES (1, 'committed after BEGIN, before the first statement')")
		if n := count(conn); n != 1 { // the snapshot is taken at the first statement, as in PostgreSQL
			t.Fatalf("the block sees %d rows, want 1", n)
		}
		mustSimple("INSERT INTO db VALUES (2, 'in the block')")
		if s := backendState(); s != "idle in transaction" {
			t.Fatalf("database session %q inside the block, want idle in transaction", s)
		}
		if n := count(other); n != 1 {
			t.Fatalf("another session sees %d rows before COMMIT, want 1", n)
		}
		mustSimple("COMMIT")
		wantStatus('I')
		if n := count(other); n != 2 {
			t.Fatalf("another session sees %d rows after COMMIT, want 2", n)
		}
	})

	t.Run("nothing between BEGIN and its end", func(t *testing.T) {
		for _, end := range []string{"COMMIT", "ROLLBACK", "END", "COMMIT AND CHAIN"} {
			mustSimple("BEGIN")
			mustSimple(end)
			want := byte('I')
			if end == "COMMIT AND CHAIN" {
				want = 'T'
			}
			wantStatus(want)
		}
		mustSimple("ROLLBACK")
		mustSimple("START TRANSACTION; COMMIT")
		wantStatus('I')
	})

	t.Run("an error fails the block; ROLLBACK ends it", func(t *testing.T) {
		mustSimple("BEGIN")
		if err := simple("SELECT nonsense FROM db"); sqlState(err) != "42703" {
			t.Fatalf("error %v, want 42703", err)
		}
		wantStatus('E')
		if err := simple("SELECT 1"); sqlState(err) != "25P02" {
			t.Fatalf("error %v in a failed block, want 25P02", err)
		}
		mustSimple("ROLLBACK")
		wantStatus('I')
	})

	t.Run("one query: BEGIN, writes, COMMIT", func(t *testing.T) {
		mustSimple("BEGIN; INSERT INTO db VALUES (3, 'x'); UPDATE db SET v = 'y' WHERE id = 3; COMMIT")
		wantStatus('I')
		mustSimple("BEGIN; INSERT INTO db VALUES (4, 'x'); ROLLBACK")
		if n := count(other); n != 3 {
			t.Fatalf("%d rows, want 3", n)
		}
	})

	t.Run("extended protocol, prepared BEGIN", func(t *testing.T) {
		for _, sd := range []struct{ name, sql string }{
			{"b", "BEGIN"}, {"ins", "INSERT INTO db VALUES ($1, 'prepared')"}, {"c", "COMMIT"},
		} {
			if _, err := pg.Prepare(ctx, sd.name, sd.sql, nil); err != nil {
				t.Fatal(err)
			}
		}
		run := func(name string, args ...[]byte) pgconn.CommandTag {
			t.Helper()
			res := pg.ExecPrepared(ctx, name, args, nil, nil).Read()
			if res.Err != nil {
				t.Fatalf("%s: %v", name, res.Err)
			}
			return res.CommandTag
		}
		if tag := run("b"); tag.String() != "BEGIN" {
			t.Fatalf("tag %q, want BEGIN", tag)
		}
		wantStatus('T')
		if s := backendState(); s != "idle" {
			t.Fatalf("database session %q after a prepared BEGIN, want idle (deferred)", s)
		}
		run("ins", []byte("5"))
		run("ins", []byte("6"))
		run("c")
		wantStatus('I')
		run("b")
		run("c") // nothing between
		wantStatus('I')
		if n := count(other); n != 5 {
			t.Fatalf("%d rows, want 5", n)
		}
	})

	t.Run("BEGIN with options is not deferred", func(t *testing.T) {
		mustSimple("BEGIN READ ONLY")
		if s := backendState(); s != "idle in transaction" {
			t.Fatalf("database session %q after BEGIN READ ONLY, want idle in transaction", s)
		}
		if err := simple("INSERT INTO db VALUES (7, 'x')"); sqlState(err) != "25006" {
			t.Fatalf("write in a read-only block: %v, want 25006", err)
		}
		mustSimple("ROLLBACK")
	})

	t.Run("the proxy's prepared BEGIN dropped by the client", func(t *testing.T) {
		mustSimple("DEALLOCATE ALL")
		mustSimple("BEGIN")
		mustSimple("INSERT INTO db VALUES (8, 'after DEALLOCATE ALL')") // the pipelined BEGIN fails, then opens the block
		mustSimple("COMMIT")
		mustSimple("DEALLOCATE ALL")
		mustSimple("BEGIN")
		mustSimple("ALTER TABLE db ADD COLUMN w int") // the temporary-table check opens the block first
		mustSimple("INSERT INTO db VALUES (9, 'x', 1)")
		mustSimple("COMMIT")
		wantStatus('I')
		if n := count(other); n != 7 {
			t.Fatalf("%d rows, want 7", n)
		}
	})

	c.converge(30 * time.Second)
}
