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
// it, so it hands the version to the applier and answers the client's
// COMMIT once the version is committed here, then ends
// (lostDatabaseAfterCommit): the cluster committed it. The database did
// commit it here (the connection closed after the COMMIT was written, and
// PostgreSQL reads what was sent before the close): applying it again
// fails on its record in tashkent.applied. The replica must count the
// version as applied and go on, not stop applying for good (skipRecorded);
// every replica ends with the row once.
func TestALocalCommitWhoseAnswerWasLostIsNotAppliedTwice(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE public.lost (id int PRIMARY KEY, n int NOT NULL)`)
	c.converge(20 * time.Second)

	var once sync.Once
	proxy.SetCommitSentHook(c.proxies[0], func(backend net.Conn) { once.Do(func() { backend.Close() }) })
	conn := c.connect(0)
	execSQL(t, conn, `BEGIN`)
	execSQL(t, conn, `INSERT INTO public.lost VALUES (1, 1)`)
	if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
		t.Fatalf("COMMIT of a certified transaction whose database answer was lost: %v, want success", err)
	}
	_, err := conn.Exec(ctx, `SELECT 1`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57P01" || !strings.Contains(pgErr.Hint, "do not retry") {
		t.Fatalf("the session after the lost answer: %v, want FATAL 57P01 whose hint says the transaction is committed", err)
	}

	later := c.connect(0)
	if _, err := later.Exec(ctx, `INSERT INTO public.lost VALUES (2, 2)`); err != nil {
		t.Fatalf("a write on the replica after the lost answer: %v (the replica stopped applying?)", err)
	}
	c.converge(20 * time.Second)
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM public.lost`); n != 2 {
			t.Fatalf("replica %d holds %d rows, want 2", i+1, n)
		}
		if n := c.countOn(i, `SELECT count(*) FROM public.lost WHERE id = 1`); n != 1 {
			t.Fatalf("replica %d holds the lost answer's row %d times", i+1, n)
		}
	}
}
