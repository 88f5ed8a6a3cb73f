package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A client that is not a superuser commits where its transaction ran, like
// any other: its session records the version through
// tashkent.record_version with the proxy's token. Before, the insert into
// tashkent.applied was refused (42501) and every such commit took soft
// recovery: rolled back, applied from its writeset, and a session that had
// written a temporary table was ended. The role can neither write
// tashkent.applied nor call record_version without the token, nor read it.
func TestARoleWithoutSuperuserCommitsInItsOwnTransaction(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.connect(0)
	execSQL(t, admin, `CREATE ROLE alice LOGIN`)
	execSQL(t, admin, `CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL)`)
	execSQL(t, admin, `GRANT SELECT, INSERT, UPDATE ON acct TO alice`)
	c.converge(10 * time.Second)

	alice := c.connectWith(1, func(cfg *pgx.ConnConfig) { cfg.User = "alice" })
	execSQL(t, alice, `CREATE TEMP TABLE scratch (n int)`)
	for i := 1; i <= 3; i++ {
		tx, err := alice.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO scratch VALUES ($1)`, i); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO acct VALUES ($1, $2)`, i, 10*i); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("alice's commit %d: %v", i, err)
		}
	}
	var scratch int
	if err := alice.QueryRow(ctx, `SELECT count(*) FROM scratch`).Scan(&scratch); err != nil {
		t.Fatalf("alice's session after her commits: %v (ended: her commits were applied from their writesets instead)", err)
	}
	if scratch != 3 {
		t.Fatalf("alice's temporary table holds %d rows, want 3: her transactions did not commit where they ran", scratch)
	}
	c.converge(10 * time.Second)

	for _, forged := range []string{
		`INSERT INTO tashkent.applied (version) VALUES (999999999)`,
		`SELECT tashkent.record_version(999999999, 'guess')`,
		`SELECT tashkent.record_version(999999999, NULL)`,
		`SELECT token FROM tashkent.record_token`,
	} {
		_, err := alice.Exec(ctx, forged)
		if sqlState(err) != "42501" {
			t.Errorf("%s as alice: %v, want 42501", forged, err)
		}
		if err != nil && strings.Contains(err.Error(), "record_token") && !strings.HasPrefix(forged, "SELECT token") {
			t.Errorf("%s: the error names the secret's table: %v", forged, err)
		}
	}
	var highest int64
	if err := c.direct(1).QueryRow(ctx, `SELECT max(version) FROM tashkent.applied`).Scan(&highest); err != nil {
		t.Fatal(err)
	}
	if highest >= 999999999 {
		t.Fatalf("a forged version was recorded: %d", highest)
	}
}
