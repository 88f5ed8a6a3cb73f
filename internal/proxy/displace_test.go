package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A certified local transaction can hold a row lock that an earlier
// version needs, when certification did not see the conflict: here a
// SELECT ... FOR UPDATE of a row the transaction does not write (a
// foreign-key check takes the same kind of lock on the parent row). The
// local transaction waits for its turn, behind the earlier version; the
// earlier version waits for the lock. Neither can go on, and the replica
// would stop for good. The local transaction must give way: it is rolled
// back and its writeset applied in its place in the order, like a remote
// one (Tashkent §8.1 soft recovery); its client is told COMMIT, which is
// true.
//
// To get the local transaction certified before the earlier version is
// applied here, a session straight on the database (not through the
// proxy, so the lock watch cannot preempt it) holds up the applier.
func TestCertifiedTransactionHoldingALockAnEarlierVersionNeedsGivesWay(t *testing.T) {
	c, local := giveWay(t, nil, "")
	ctx := context.Background()
	// The session goes on: the transaction changed nothing the writeset
	// does not carry.
	var balance1, balance2, audits int
	if err := local.QueryRow(ctx, `SELECT (SELECT balance FROM accounts WHERE id = 1), (SELECT balance FROM accounts WHERE id = 2),
		(SELECT count(*) FROM audit)`).Scan(&balance1, &balance2, &audits); err != nil {
		t.Fatalf("the session after its transaction gave way: %v", err)
	}
	if balance1 != 110 || balance2 != 101 || audits != 1 {
		t.Fatalf("replica 1 holds balances %d, %d and %d audit rows; want 110, 101 and 1", balance1, balance2, audits)
	}
	c.converge(10 * time.Second)
}

// A transaction that gives way loses what its writeset does not carry:
// its settings and its temporary-table rows. Its COMMIT still succeeds (it
// is committed), with a warning, and then the session ends (57P01), rather
// than going on with state the client does not expect.
func TestGivingWayEndsASessionWhoseSettingsOrTemporaryTablesItChanged(t *testing.T) {
	for name, statement := range map[string]string{
		"setting":         `SET myapp.marker = 'set in the transaction'`,
		"temporary table": `INSERT INTO scratch VALUES (1)`,
	} {
		t.Run(name, func(t *testing.T) {
			var warned []string
			c, local := giveWay(t, func(cfg *pgx.ConnConfig) {
				cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { warned = append(warned, n.Message) }
			}, `CREATE TEMP TABLE scratch (x int)`, statement)
			if len(warned) == 0 || !strings.Contains(warned[0], "settings and temporary-table changes were lost") {
				t.Fatalf("notices with the COMMIT: %q, want the warning that the session's state was lost", warned)
			}
			_, err := local.Exec(context.Background(), `SELECT 1`)
			if err == nil {
				t.Fatal("the session went on after losing its settings or temporary-table rows")
			}
			if code := sqlState(err); code != "" && code != "57P01" {
				t.Fatalf("the session ended with %v, want 57P01 or a closed connection", err)
			}
			c.converge(10 * time.Second)
		})
	}
}

// giveWay builds the situation, with the client's connection configured
// by configure, before its transaction sessionSQL and in it txSQL, and
// returns once the COMMIT succeeded.
func giveWay(t *testing.T, configure func(*pgx.ConnConfig), sessionSQL string, txSQL ...string) (*testCluster, *pgx.Conn) {
	t.Helper()
	c := startCluster(t, 2, proxy.ModeMW)
	ctx := context.Background()
	setup := c.connect(0)
	execSQL(t, setup, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)`)
	execSQL(t, setup, `CREATE TABLE audit (id int PRIMARY KEY, note text NOT NULL)`)
	execSQL(t, setup, `INSERT INTO accounts VALUES (1, 100), (2, 100)`)
	c.converge(10 * time.Second)

	// The applier of replica 1 stops at the next remote version (row 2).
	holder := c.direct(0)
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT FROM accounts WHERE id = 2 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	other := c.connect(1)
	execSQL(t, other, `UPDATE accounts SET balance = balance + 1 WHERE id = 2`)

	// The local transaction locks row 1 without writing it.
	local := c.connectWith(0, configure)
	if sessionSQL != "" {
		execSQL(t, local, sessionSQL)
	}
	tx, err := local.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	statements := append([]string{`SELECT FROM accounts WHERE id = 1 FOR UPDATE`,
		`INSERT INTO audit VALUES (1, 'checked account 1')`}, txSQL...)
	for _, sql := range statements {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// A version before the local transaction's updates row 1.
	execSQL(t, other, `UPDATE accounts SET balance = balance + 10 WHERE id = 1`)

	committed := make(chan error, 1)
	go func() { committed <- tx.Commit(ctx) }()
	// Let the local transaction be certified and wait for its turn, then
	// let the applier go: it reaches row 1, locked by the local transaction.
	time.Sleep(500 * time.Millisecond)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-committed:
		if err != nil {
			t.Fatalf("COMMIT of the certified transaction: %v, want success", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("COMMIT did not return: the certified transaction and the earlier version wait for each other")
	}
	return c, local
}
