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

// DDL that names a temporary table without a schema stays local, like the
// table: the other replicas have no such table, and the name may even mean
// one of their permanent tables. Before the proxy asked the database what
// such names resolve to, "CREATE INDEX ON tmp" after "CREATE TEMP TABLE
// tmp" reached the other replicas, whose appliers then stopped on it for
// good ("relation tmp does not exist").
func TestDDLOnAnUnqualifiedTemporaryTableStaysLocal(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	modes := map[string]func(*pgx.Conn, string) error{"simple": execSimple, "extended": execExtended}
	for name, mode := range modes {
		conn := c.connect(0)
		for _, sql := range []string{
			"CREATE TABLE shadowed_%[1]s (id int PRIMARY KEY, v int)",
			"INSERT INTO shadowed_%[1]s VALUES (1, 1)",
			"CREATE TEMP TABLE tmp_%[1]s (id int PRIMARY KEY, v int)",
			"CREATE INDEX tmp_v_%[1]s ON tmp_%[1]s (v)",
			"ALTER TABLE tmp_%[1]s ADD COLUMN w int",
			"CREATE TEMPORARY TABLE shadowed_%[1]s (id int PRIMARY KEY)", // now the name means the temporary table
			"ALTER TABLE shadowed_%[1]s ADD COLUMN only_here int",
			"DROP TABLE shadowed_%[1]s",                            // the temporary one
			"ALTER TABLE shadowed_%[1]s ADD COLUMN everywhere int", // the permanent one again: replicated
			"BEGIN",
			"CREATE TEMP TABLE tmp2_%[1]s (id int) ON COMMIT DROP",
			"CREATE INDEX ON tmp2_%[1]s (id)",
			"COMMIT",
			"DROP INDEX tmp_v_%[1]s",
			"DROP TABLE tmp_%[1]s",
			"INSERT INTO shadowed_%[1]s VALUES (2, 2, 2)",
		} {
			if strings.Contains(sql, "%") {
				sql = fmt.Sprintf(sql, name)
			}
			if err := mode(conn, sql); err != nil {
				t.Fatalf("%s: %s: %v", name, sql, err)
			}
		}
	}
	c.converge(30 * time.Second)
	for name := range modes {
		var columns int
		q := "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'shadowed_" + name + "'"
		if err := c.direct(1).QueryRow(context.Background(), q).Scan(&columns); err != nil {
			t.Fatal(err)
		}
		if columns != 3 {
			t.Fatalf("%s: the other replica's shadowed table has %d columns, want 3 (id, v, everywhere)", name, columns)
		}
	}
}
