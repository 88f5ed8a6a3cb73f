package agent_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// historyRows reads replica i's tashkent.history as "epoch@first ...".
func historyRows(t *testing.T, c *clustertest.Cluster, i int) (rows []string, epochs []int64) {
	t.Helper()
	conn := c.Connect(i)
	r, err := conn.Query(context.Background(), `SELECT epoch, first_version FROM tashkent.history ORDER BY first_version`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for r.Next() {
		var epoch, first int64
		if err := r.Scan(&epoch, &first); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, strconv.FormatInt(epoch, 10)+"@"+strconv.FormatInt(first, 10))
		epochs = append(epochs, epoch)
	}
	return rows, epochs
}

// Every replica records the certifier's epoch once, from the first version
// it was delivered, and sends it when its agent opens its stream: a
// restarted agent is admitted with it. The same versions under another
// epoch (what a replica of another certifier's history would hold) are
// refused, and the agent halts for a rebuild; meanwhile it judges no
// transaction's state by that certifier's durable version, and its
// server's durability feed hears nothing of it.
func TestAReplicaRecordsItsHistoryAndIsRefusedWithAnotherOne(t *testing.T) {
	c, base := startWithSchema(t, 2, clustertest.Options{}, schema)
	v := write(t, c, 0, 1, 3)
	c.AwaitCommitted(1, v, time.Minute)
	for i := range 2 {
		rows, epochs := historyRows(t, c, i)
		if len(rows) != 1 || epochs[0] <= 0 || !strings.HasSuffix(rows[0], "@1") {
			t.Fatalf("replica %d's history is %v after versions 1..%d of one certifier (schema at %d), want one run from version 1", i+1, rows, v, base)
		}
	}
	c.StopAgent(1)
	c.StartAgent(1)
	c.AwaitState(1, agent.StateServing, time.Minute)

	c.StopAgent(1)
	c.Exec(1, `SET tashkent.maintenance = on; UPDATE tashkent.history SET epoch = epoch + 1`)
	second := c.Connect(1)                    // a superuser: let in while halted
	heard := pgtest.DurableVersion(t, second) // NULL if its feed was between tries all along
	later := write(t, c, 0, 10, 3)            // the certifier's durable version passes what replica 2 heard
	c.RunAgent(1, c.Config(1))                // it never serves
	c.AwaitState(1, agent.StateHalted, time.Minute)
	if _, why := c.Agents[1].State(); !strings.Contains(why, "needs state transfer") || !strings.Contains(why, "agrees with the certifier's log only up to version 0") {
		t.Fatalf("the replica with another epoch at the same versions halted with %q, want a state-transfer refusal naming the common version 0", why)
	}
	_, err := second.Exec(context.Background(), `SELECT tashkent.txn_state($1)`, int64(v))
	if pgcode.Of(err) != pgcode.CannotConnectNow || !strings.Contains(err.Error(), "refused this replica's history") {
		t.Fatalf("txn_state(%d) on the refused replica, whose history holds another epoch there: %v; want 57P03 saying the certifier refused its history", v, err)
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := pgtest.DurableVersion(t, second); got != nil && *got >= int64(later) {
			t.Fatalf("the refused replica's durable_version() is %s (it had heard %s): its feed was told the durable version of the certifier that refused it (%d or more)",
				pgtest.ShowVersion(got), pgtest.ShowVersion(heard), later)
		}
	}
}
