package proxy_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A client that sends its own TimeZone and DateStyle in its startup packet
// (JDBC sends the JVM's time zone) is served like any other: the start
// time of the database that its session reads must not look like another
// database's start time (a restart the proxy has not recovered from) just
// because the session prints times in another zone or style.
func TestASessionInItsOwnTimeZoneIsServed(t *testing.T) {
	c := startCluster(t, 1, proxy.ModeMW)
	conn := c.connectWith(0, func(cfg *pgx.ConnConfig) {
		cfg.RuntimeParams["TimeZone"] = "America/St_Johns"
		cfg.RuntimeParams["DateStyle"] = "SQL, DMY"
	})
	execSQL(t, conn, `CREATE TABLE t (id int PRIMARY KEY)`)
	execSQL(t, conn, `INSERT INTO t VALUES (1)`)
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count(*) = %d, %v; want 1", n, err)
	}
}
