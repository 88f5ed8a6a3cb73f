package proxy_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A session whose connection to its database breaks after the certified
// transaction's COMMIT was sent cannot tell whether the database committed
// it, so it hands the version to the applier, answers the client's COMMIT
// once the version is committed here, and ends (lostDatabaseAfterCommit):
// the cluster committed it. The database did commit it here (the
// connection closed after the COMMIT was written, and PostgreSQL reads
// what was sent before the close), so applying it again fails: on its
// record in tashkent.applied, or before it, on DDL that cannot run twice.
// The replica must count the version as applied and go on, not stop
// applying for good (skipRecorded); every replica ends with it once. The
// client learns the transaction committed also when the COMMIT is not the
// last statement of its query.
func TestALocalCommitWhoseAnswerWasLostIsNotAppliedTwice(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	execSQL(t, c.connect(0), `CREATE TABLE public.lost (id int PRIMARY KEY, n int NOT NULL)`)
	c.converge(20 * time.Second)
	loseNextAnswer := func() {
		var once sync.Once
		proxy.SetCommitSentHook(c.proxies[0], func(backend net.Conn) { once.Do(func() { backend.Close() }) })
	}
	wantCommittedAndEnded := func(what string, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57P01" || !strings.Contains(pgErr.Hint, "do not retry") {
			t.Fatalf("%s: %v, want FATAL 57P01 whose hint says the transaction is committed", what, err)
		}
	}

	t.Run("rows", func(t *testing.T) {
		loseNextAnswer()
		conn := c.connect(0)
		execSQL(t, conn, `BEGIN`)
		execSQL(t, conn, `INSERT INTO public.lost VALUES (1, 1)`)
		if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
			t.Fatalf("COMMIT of a certified transaction whose database answer was lost: %v, want success", err)
		}
		_, err := conn.Exec(ctx, `SELECT 1`)
		wantCommittedAndEnded("the session after the lost answer", err)
	})

	t.Run("DDL", func(t *testing.T) {
		loseNextAnswer()
		conn := c.connect(0)
		execSQL(t, conn, `BEGIN`)
		execSQL(t, conn, `CREATE TABLE public.lost_ddl (id int PRIMARY KEY)`)
		if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
			t.Fatalf("COMMIT of certified DDL whose database answer was lost: %v, want success", err)
		}
	})

	t.Run("COMMIT with more after it in one query", func(t *testing.T) {
		loseNextAnswer()
		conn := c.connect(0)
		results, err := conn.PgConn().Exec(ctx, `BEGIN; INSERT INTO public.lost VALUES (3, 3); COMMIT; SELECT 1`).ReadAll()
		if len(results) < 3 || results[2].CommandTag.String() != "COMMIT" || results[2].Err != nil {
			t.Fatalf("the query's results: %d, want the COMMIT's among them", len(results))
		}
		wantCommittedAndEnded("the rest of the query after the lost answer", err)
	})

	later := c.connect(0)
	if _, err := later.Exec(ctx, `INSERT INTO public.lost VALUES (2, 2)`); err != nil {
		t.Fatalf("a write on the replica after the lost answers: %v (the replica stopped applying?)", err)
	}
	c.converge(20 * time.Second)
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM public.lost`); n != 3 {
			t.Fatalf("replica %d holds %d rows, want 3", i+1, n)
		}
		if n := c.countOn(i, `SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = 'lost_ddl'`); n != 1 {
			t.Fatalf("replica %d holds %d tables lost_ddl, want 1", i+1, n)
		}
	}
}
