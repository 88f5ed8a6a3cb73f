package compat

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// A role that is not a superuser, trusted with DDL (--trust-ddl-roles),
// is what an ORM's migrations would run as: the application's own role,
// owner of its tables. The other replicas run its DDL as the agent's
// superuser, so there the tables belong to that superuser and the role
// has no right on them: the application cannot write them through another
// replica (42501). The test checks that this is so, and fails once it is
// not, so that docs/COMPATIBILITY.md stays true.
func TestTrustedRoleOwnsItsTablesOnItsReplicaOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster; not in -short")
	}
	c := clustertest.Start(t, 2, clustertest.Options{Settings: upSettings, Agent: func(_ int, cfg *agent.Config) { cfg.TrustDDLRoles = true }})
	c.Exec(0, `CREATE ROLE orm_owner LOGIN; GRANT CREATE ON SCHEMA public TO orm_owner`)
	c.AwaitConverged(convergeLimit)
	ctx := context.Background()
	as := func(i int) *pgx.Conn {
		conn, err := c.ConnectAs(i, "orm_owner")
		if err != nil {
			t.Fatalf("replica %d: connect as orm_owner: %v", i+1, err)
		}
		return conn
	}
	r1, r2 := as(0), as(1)
	if _, err := r1.Exec(ctx, `CREATE TABLE orm_owned (id int PRIMARY KEY, v text)`); err != nil {
		t.Fatalf("CREATE TABLE as the trusted role on replica 1: %v", err)
	}
	c.AwaitConverged(convergeLimit)
	var owners [2]string
	for i := range owners {
		if err := c.Connect(i).QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE tablename = 'orm_owned'`).Scan(&owners[i]); err != nil {
			t.Fatalf("replica %d: %v", i+1, err)
		}
	}
	if _, err := r1.Exec(ctx, `INSERT INTO orm_owned VALUES (1, 'on replica 1')`); err != nil {
		t.Fatalf("INSERT as the owner on replica 1: %v", err)
	}
	_, err := r2.Exec(ctx, `INSERT INTO orm_owned VALUES (2, 'on replica 2')`)
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("INSERT as orm_owner on replica 2, where the table's owner is %s: %v, want 42501 permission denied "+
			"(if the role can write its tables on every replica now, update docs/COMPATIBILITY.md and this test)", owners[1], err)
	}
	t.Logf("owner of orm_owned: %s on replica 1, %s on replica 2; INSERT as orm_owner on replica 2: %s", owners[0], owners[1], pe.Message)
}
