package cluster_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// rewindBound is how long a rewind may take from the refusal that asks
// for it to its end, clients retrying at once included.
const rewindBound = 3 * time.Second

// Clients that retry at once do not hold a rewind up. On replica2, clients
// of the agent's own role (postgres, which the admission gate lets in)
// update a row in a tight loop and reconnect and retry at once after any
// error, as an application that does not back off would. The agent raises
// the rewind fence before it ends the transactions in the rewind's way, so
// they cannot begin new ones: the rewind ends within rewindBound of the
// refusal that asked for it, and the clients meanwhile get 57P03 saying
// the replica is rewinding.
func TestClientsRetryingAtOnceDoNotHoldARewindUp(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newEarlyDeliveryCluster(t, bin)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	w := runGroupWorkload(ctx, t, &wg, r1.DSN())
	retrying := &retryingClients{}
	for k := 1; k <= 4; k++ {
		wg.Go(func() { retrying.run(ctx, r2.DSN(), k) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	time.Sleep(4 * time.Second) // pins to undo to (TestReplicasThatAppliedVersionsTheCertifierLostAreRewound)
	killCertifierLosingVersions(t, bin, dir, r2, func() {})
	took := awaitRewind(t, r2.Agent.Log)
	commits, refusals, refusal := retrying.counts()
	t.Logf("the rewind took %v from the refusal that asked for it; %d commits and %d refusals by the fence on replica2 (%s)",
		took.Round(time.Millisecond), commits, refusals, refusal)
	if took > rewindBound {
		t.Errorf("the rewind took %v from the refusal that asked for it, more than %v: clients that retry at once held it up", took, rewindBound)
	}
	if refusals == 0 {
		t.Error("no client on replica2 was refused with 57P03 during the rewind")
	}
	s := awaitHealthy(t, bin, dir)
	for _, r := range s.Replicas {
		if r.Rebuilt != nil {
			t.Errorf("%s was rebuilt (%+v): it should have been rewound", r.Name, r.Rebuilt)
		}
	}
	awaitCommitOn(t, retrying) // clients' transactions go on after the rewind
	cancel()
	wg.Wait()
	checkConverged(t, load(t, dir), w)
}

var logTime = regexp.MustCompile(`(?:^|\s)time=(\S+)`)

// A rewind ends with its undo and finish, or, when its finish was
// refused, with the finish tried again at the agent's next start.
var rewindEnds = []string{
	"rewound: the replica went back past versions that failed",
	"finished a rewind that was interrupted after its undo",
}

// awaitRewind waits up to a minute until the agent's log at path says a
// rewind ended, and returns the time from the last refusal that asked for
// it to that end.
func awaitRewind(t *testing.T, path string) time.Duration {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		log := readFile(t, path)
		if took, ok := rewindDuration(t, log); ok {
			return took
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not say a rewind ended after a minute:\n%s", path, tailLines(log, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rewindDuration is the time from the last refusal that asked the agent
// to rewind to the first end of a rewind after it, from the agent's log;
// false if no rewind ended yet.
func rewindDuration(t *testing.T, log string) (time.Duration, bool) {
	t.Helper()
	var asked time.Time
	for _, line := range strings.Split(log, "\n") {
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("the agent's log line %q: %v", line, err)
		}
		if strings.Contains(line, rewindAskedText) {
			asked = at
		}
		for _, end := range rewindEnds {
			if strings.Contains(line, end) && !asked.IsZero() {
				return at.Sub(asked), true
			}
		}
	}
	return 0, false
}

// retryingClients update a row of hot in a tight loop on one replica,
// reconnecting and retrying at once after any error.
type retryingClients struct {
	mu         sync.Mutex
	committed  int
	refusals   int
	oneRefusal string
}

func (c *retryingClients) run(ctx context.Context, dsn string, k int) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			conn, _ = pgx.Connect(cctx, dsn)
			cancel()
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := bumpHot(qctx, conn, k)
		cancel()
		c.note(err)
		if conn.IsClosed() {
			conn = nil
		}
	}
}

func bumpHot(ctx context.Context, conn *pgx.Conn, id int) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = $1", id); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (c *retryingClients) note(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		c.committed++
	case refusedByRewind(err) && errors.As(err, &pgErr):
		c.refusals++
		c.oneRefusal = pgErr.Message + " (HINT: " + pgErr.Hint + ")"
	}
}

// refusedByRewind reports whether err is the rewind fence's refusal.
func refusedByRewind(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgcode.CannotConnectNow && strings.Contains(pgErr.Message, "rewinding versions that failed")
}

// awaitCommitOn waits up to 10 seconds for one more commit of c.
func awaitCommitOn(t *testing.T, c *retryingClients) {
	t.Helper()
	before, _, _ := c.counts()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if now, _, _ := c.counts(); now > before {
			return
		}
	}
	t.Error("no client on replica2 committed in the 10 s after the rewind: the fence was not lowered")
}

// counts returns the commits, the refusals by the fence and one of them.
func (c *retryingClients) counts() (commits, refusals int, refusal string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.committed, c.refusals, c.oneRefusal
}
