package compat

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// A role that is not a superuser, trusted with DDL (--trust-ddl-roles),
// is what an ORM's migrations run as: the application's own role, owner
// of its tables. The other replicas run its DDL as that role (the DDL
// change carries it), so the tables it creates are its own on every
// replica, and its application writes them through any replica; where
// the role lacks a privilege it has on the origin, as the applier.
func TestTrustedRoleOwnsItsTablesOnEveryReplica(t *testing.T) {
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
	for _, sql := range []string{
		`CREATE TABLE orm_owned (id int PRIMARY KEY, v text)`,
		`CREATE SEQUENCE orm_owned_seq`,
		`CREATE INDEX orm_owned_v ON orm_owned (v)`,
	} {
		if _, err := r1.Exec(ctx, sql); err != nil {
			t.Fatalf("%s as the trusted role on replica 1: %v", sql, err)
		}
	}
	c.AwaitConverged(convergeLimit)
	for i := range 2 {
		rows, err := c.Connect(i).Query(ctx, `SELECT c.relname, pg_catalog.pg_get_userbyid(c.relowner)
			FROM pg_catalog.pg_class c WHERE c.relname LIKE 'orm_owned%' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		owners, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Rel, Owner string }])
		if err != nil {
			t.Fatal(err)
		}
		if len(owners) != 4 { // the table, its key's index, the sequence, the index
			t.Fatalf("replica %d: %d relations named orm_owned*, want 4: %v", i+1, len(owners), owners)
		}
		for _, o := range owners {
			if o.Owner != "orm_owner" {
				t.Errorf("replica %d: %s belongs to %s, want orm_owner (the role that ran the DDL)", i+1, o.Rel, o.Owner)
			}
		}
	}
	for i, conn := range []*pgx.Conn{r1, r2} {
		if _, err := conn.Exec(ctx, `INSERT INTO orm_owned VALUES ($1, 'written through this replica')`, i+1); err != nil {
			t.Fatalf("INSERT as orm_owner on replica %d: %v", i+1, err)
		}
	}
	c.AwaitConverged(convergeLimit)

	// A privilege the role lacks on one replica only (revoked there in
	// maintenance): that replica runs the DDL as its applier instead of
	// halting, and the table belongs to the applier's role there.
	local := c.Connect(1)
	for _, sql := range []string{`SET tashkent.maintenance = on`, `REVOKE CREATE ON SCHEMA public FROM orm_owner`} {
		if _, err := local.Exec(ctx, sql); err != nil {
			t.Fatalf("%s on replica 2: %v", sql, err)
		}
	}
	if _, err := r1.Exec(ctx, `CREATE TABLE orm_elsewhere (id int PRIMARY KEY)`); err != nil {
		t.Fatalf("CREATE TABLE as the trusted role on replica 1: %v", err)
	}
	c.AwaitConverged(convergeLimit)
	var owner string
	if err := c.Connect(1).QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE tablename = 'orm_elsewhere'`).Scan(&owner); err != nil {
		t.Fatalf("replica 2 has no orm_elsewhere: %v", err)
	}
	if owner == "orm_owner" {
		t.Errorf("replica 2: orm_elsewhere belongs to orm_owner, who may not create in public there")
	}
}
