package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A replica whose database is replaced by an empty one (rebuilt, restored
// from an old copy) is caught up from the certifier's log, and its proxy's
// new transactions are new: a transaction id of an earlier run, repeated,
// would be taken by the certifier for a retry and answered with the old
// version, and the new writes would be lost while the client hears COMMIT.
func TestProxyOnAFreshDatabaseCatchesUpAndNeverReusesTransactionIDs(t *testing.T) {
	c := startCluster(t, 1, proxy.ModeMW)
	a := c.connect(0)
	execSQL(t, a, `CREATE TABLE t (k int PRIMARY KEY)`)
	for k := range 3 {
		execSQL(t, a, `INSERT INTO t VALUES ($1)`, k)
	}
	a.Close(context.Background())
	before := c.certifier.Service.DurableVersion()

	c.stopProxy(0)
	c.dbs[0] = pgtest.Start(t, pgtest.SynchronousCommitOff())
	c.startProxy(0)
	b := c.connect(0)
	for k := 3; k < 6; k++ {
		execSQL(t, b, `INSERT INTO t VALUES ($1)`, k)
	}
	if after := c.certifier.Service.DurableVersion(); after != before+3 {
		t.Fatalf("three new commits moved the certifier from version %d to %d", before, after)
	}
	c.converge(10 * time.Second)
	var n int
	if err := c.direct(0).QueryRow(context.Background(), `SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Fatalf("the rebuilt replica holds %d rows, want 3 from the log and 3 new", n)
	}
}
