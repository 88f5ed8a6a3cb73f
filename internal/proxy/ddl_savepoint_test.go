package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// DDL undone by ROLLBACK TO SAVEPOINT is not replicated; DDL kept by
// RELEASE is. Before the proxy followed savepoints, the other replicas
// created the table the originating replica had rolled back (Postgres-R(SI)
// §5.1: the DDL a transaction replicates is the DDL it commits).
func TestDDLUndoneBySavepointRollbackIsNotReplicated(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	modes := map[string]func(*pgx.Conn, string) error{"simple": execSimple, "extended": execExtended}
	for name, mode := range modes {
		conn := c.connect(0)
		statements := []string{
			"BEGIN",
			"CREATE TABLE kept_%[1]s (id int PRIMARY KEY)",
			"SAVEPOINT a",
			"CREATE TABLE undone_%[1]s (id int PRIMARY KEY)",
			"SAVEPOINT inner_sp",
			"CREATE TABLE undone_inner_%[1]s (id int PRIMARY KEY)",
			"ROLLBACK TO SAVEPOINT a",
			"SAVEPOINT a", // a name used again: ROLLBACK TO and RELEASE mean the latest
			"CREATE TABLE released_%[1]s (id int PRIMARY KEY)",
			"RELEASE SAVEPOINT a",
			"SAVEPOINT b",
			"CREATE TABLE undone_again_%[1]s (id int PRIMARY KEY)",
			"ROLLBACK TO b",
			"INSERT INTO kept_%[1]s VALUES (1)",
			"COMMIT",
		}
		for _, st := range statements {
			if strings.Contains(st, "%") {
				st = fmt.Sprintf(st, name)
			}
			if err := mode(conn, st); err != nil {
				t.Fatalf("%s: %s: %v", name, st, err)
			}
		}
	}
	c.converge(30 * time.Second) // also compares the replicas' lists of tables

	other := c.direct(1)
	for name := range modes {
		for table, want := range map[string]bool{"kept": true, "released": true, "undone": false, "undone_inner": false, "undone_again": false} {
			var exists bool
			q := fmt.Sprintf("SELECT to_regclass('%s_%s') IS NOT NULL", table, name)
			if err := other.QueryRow(context.Background(), q).Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if exists != want {
				t.Errorf("%s: table %s_%s exists on the other replica: %v, want %v", name, table, name, exists, want)
			}
		}
	}
}

// execSimple runs sql with the simple query protocol (pgx does for Exec
// without arguments), execExtended with the extended one: Parse of the
// unnamed statement, Bind, Describe, Execute, Sync.
func execSimple(conn *pgx.Conn, sql string) error {
	_, err := conn.Exec(context.Background(), sql)
	return err
}

func execExtended(conn *pgx.Conn, sql string) error {
	return conn.PgConn().ExecParams(context.Background(), sql, nil, nil, nil, nil).Read().Err
}
