package guarantees_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// A replica that applies more slowly than the cluster commits does not
// fall behind without bound: past the flow-control limit it asks the
// certifier to hold the other replicas' commits until it has caught up to
// half the limit (Galera's flow control; internal/agent/flowcontrol.go).
// Replica 2 is made slow by a trigger of its own (created in maintenance,
// so not replicated, and ENABLE ALWAYS, so it fires in the applier) that
// sleeps 2 ms per row; replica 1's writers commit faster than that.
func TestFlowControlBoundsASlowReplicasBacklog(t *testing.T) {
	const limit = 64
	c := start(t, 2, clustertest.Options{Agent: func(i int, cfg *agent.Config) { cfg.FlowControlLimit = limit }})
	c.Exec(0, `CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz DEFAULT now())`)
	c.converge()
	slow := c.connectAs(1, "postgres", nil)
	for _, sql := range []string{
		`SET tashkent.maintenance = on`,
		`CREATE FUNCTION slow_apply() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$`,
		`CREATE TRIGGER slow_apply BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION slow_apply()`,
		`ALTER TABLE events ENABLE ALWAYS TRIGGER slow_apply`,
	} {
		execSQL(t, slow, sql)
	}

	var next atomic.Int64
	ctx, stop := context.WithTimeout(context.Background(), 4*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for range 4 {
		conn := c.connectAs(0, "postgres", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each insert runs to its end (a cancelled one could still
			// commit after the writers stopped, past the convergence check).
			for ctx.Err() == nil {
				if _, err := conn.Exec(context.Background(), `INSERT INTO events (id) VALUES ($1)`, next.Add(1)); err != nil {
					t.Errorf("insert: %v", err)
					return
				}
			}
		}()
	}
	var worst uint64
	for ctx.Err() == nil {
		head, slowest := c.Agents[0].CommittedVersion(), c.Agents[1].CommittedVersion()
		if head > slowest && head-slowest > worst {
			worst = head - slowest
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("%d rows committed in 4 s; replica 2 fell behind by at most %d versions; %d pauses",
		next.Load(), worst, c.Agents[1].FlowControlPauses())
	if c.Agents[1].FlowControlPauses() == 0 {
		t.Fatalf("the slow replica never asked for a pause (at most %d versions behind): the load did not outrun it, so the bound was not tested", worst)
	}
	// The bound: the limit, plus what was certified while the pause was
	// on its way (one check interval of the agent, one message) and the
	// writers' requests already past the certifier's hold.
	if bound := uint64(4 * limit); worst > bound {
		t.Errorf("replica 2 fell behind by %d versions, over %d (flow-control limit %d)", worst, bound, limit)
	}
	c.converge()
	c.sameTables()
}

// A replica that cannot apply at all (its applier's backend stopped with
// SIGSTOP) neither stops the others nor grows its agent's memory: past
// --apply-backlog-bytes the agent stops reading the certifier stream, and
// the certifier, which reads what it sends from its log, keeps the rest
// on disk. Once the backend runs again, the replica catches up.
func TestAStoppedReplicaKeepsItsBacklogBoundedAndStopsNoOne(t *testing.T) {
	const backlogMax = 256 << 10
	c := start(t, 3, clustertest.Options{Agent: func(i int, cfg *agent.Config) {
		if i == 2 {
			cfg.ApplyBacklogBytes = backlogMax
		}
	}})
	c.Exec(0, `CREATE TABLE blobs (id bigint PRIMARY KEY, body text)`)
	c.converge()

	var commits atomic.Int64
	ctx, stopWriters := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 4 {
		conn := c.connectAs(i%2, "postgres", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := int64(i); ctx.Err() == nil; id += 4 {
				// 16 KiB of text per row: the writeset is as large.
				_, err := conn.Exec(context.Background(), `INSERT INTO blobs VALUES ($1, repeat(md5(random()::text), 512))`, id)
				if err != nil {
					t.Errorf("insert: %v", err)
					return
				}
				commits.Add(1)
			}
		}()
	}
	defer func() { stopWriters(); wg.Wait() }()

	const phase = 4 * time.Second
	time.Sleep(phase)
	baseline := commits.Load()

	resume := c.stopApplier(2)
	stoppedFrom := commits.Load()
	worst := 0
	for deadline := time.Now().Add(phase); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		worst = max(worst, c.Agents[2].BacklogBytes())
	}
	whileStopped := commits.Load() - stoppedFrom
	resume()
	stopWriters()
	wg.Wait()

	written := whileStopped * 16 << 10
	bound := backlogMax + messageEntryBytesMax + 64<<10 // the limit, one delivery, one entry
	t.Logf("commits: %d in %v before, %d in %v with replica 3's applier stopped (%.2fx); its agent held at most %d bytes of %d written",
		baseline, phase, whileStopped, phase, float64(whileStopped)/float64(baseline), worst, written)
	if written < 2*int64(bound) {
		t.Fatalf("only %d bytes were written while replica 3 was stopped: too little to test a bound of %d", written, bound)
	}
	if worst > bound {
		t.Errorf("replica 3's agent held %d bytes of undelivered versions, over %d (--apply-backlog-bytes %d)", worst, bound, backlogMax)
	}
	if whileStopped < baseline/2 {
		t.Errorf("replicas 1 and 2 committed %d rows while replica 3 was stopped, under half of the %d before", whileStopped, baseline)
	}
	c.converge()
	c.sameTables()
}

// messageEntryBytesMax is the certifier's bound on the entries of one
// delivery message (internal/certifier/stream.go).
const messageEntryBytesMax = 4 << 20

// A replica whose apply is stuck refuses its clients' writes, at once and
// with 57P03, instead of certifying them and keeping them waiting at
// COMMIT; reads go on; once it applies again, writes are taken again.
func TestAStuckReplicaRefusesWritesAndKeepsReads(t *testing.T) {
	c := start(t, 2, clustertest.Options{Agent: func(i int, cfg *agent.Config) { cfg.RefuseWritesAfter = time.Second }})
	c.Exec(0, `CREATE TABLE notes (id bigint PRIMARY KEY)`)
	c.converge()
	client := c.connectAs(1, "postgres", nil)
	ctx := context.Background()

	resume := c.stopApplier(1)
	c.Exec(0, `INSERT INTO notes VALUES (1)`) // a version replica 2 cannot apply
	time.Sleep(3 * time.Second)               // past --refuse-writes-after (1 s)
	done := make(chan error, 1)
	go func() {
		_, err := client.Exec(ctx, `INSERT INTO notes VALUES (2)`)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		resume()
		t.Fatal("a write on the stuck replica waited 10 s instead of being refused")
	}
	if code := sqlState(err); code != "57P03" || !strings.Contains(err.Error(), "cannot take writes now") {
		t.Fatalf("a write on the stuck replica: %v, want 57P03 \"cannot take writes now\"", err)
	}
	var n int
	if err := client.QueryRow(ctx, `SELECT count(*) FROM notes`).Scan(&n); err != nil {
		t.Fatalf("a read on the stuck replica: %v", err)
	}
	resume()
	c.converge()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err = client.Exec(ctx, `INSERT INTO notes VALUES (3)`); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes still refused 30 s after the replica applied again: %v", err)
		}
	}
	c.converge()
	c.sameTables()
}

// stopApplier stops replica i's applier backend with SIGSTOP; the
// function returned lets it go on (once; also when the test ends).
func (c *cluster) stopApplier(i int) (resume func()) {
	c.t.Helper()
	pid := c.countOn(i, `SELECT applier_pid FROM tashkent.status()`)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		c.t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { syscall.Kill(pid, syscall.SIGCONT) }) }
	c.t.Cleanup(resume)
	return resume
}
