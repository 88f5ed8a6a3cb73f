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
	"github.com/tashkent-db/tashkent/internal/pgcode"
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
	baseline := float64(commits.Load()) / phase.Seconds()

	// Stopped until three times the bound was written (or a minute).
	bound := backlogMax + messageEntryBytesMax + 64<<10 // the limit, one delivery, one entry
	resume := c.stopApplier(2)
	stoppedFrom, stoppedAt := commits.Load(), time.Now()
	worst := 0
	written := func() int64 { return (commits.Load() - stoppedFrom) * 16 << 10 }
	for deadline := time.Now().Add(time.Minute); written() < 3*int64(bound) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		worst = max(worst, c.Agents[2].BacklogBytes())
	}
	stoppedFor, whileStopped := time.Since(stoppedAt), commits.Load()-stoppedFrom
	resume()
	stopWriters()
	wg.Wait()

	rate := float64(whileStopped) / stoppedFor.Seconds()
	t.Logf("commits: %.0f/s before, %.0f/s with replica 3's applier stopped (%.2fx); its agent held at most %d bytes of %d written in %v",
		baseline, rate, rate/baseline, worst, written(), stoppedFor.Round(time.Millisecond))
	if written() < 3*int64(bound) {
		t.Fatalf("only %d bytes were written in a minute while replica 3 was stopped: too little to test a bound of %d", written(), bound)
	}
	if worst > bound {
		t.Errorf("replica 3's agent held %d bytes of undelivered versions, over %d (--apply-backlog-bytes %d)", worst, bound, backlogMax)
	}
	if rate < baseline/2 {
		t.Errorf("replicas 1 and 2 committed %.0f rows/s while replica 3 was stopped, under half of the %.0f/s before", rate, baseline)
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
	if code := pgcode.Of(err); code != pgcode.CannotConnectNow || !strings.Contains(err.Error(), "cannot take writes now") {
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

// A local transaction whose certification is under way holds a row lock
// the apply needs while the apply backlog is over its bound: the agent
// reads the stream on (the lock watch tells it), the abort arrives, and
// the client hears 40001 at once, not the certify timeout's 08007.
func TestAnUndecidedLockHolderIsAnsweredWhileTheBacklogIsFull(t *testing.T) {
	c := start(t, 2, clustertest.Options{
		Settings: map[string]string{"tashkent.certify_timeout": "20s"},
		Agent: func(i int, cfg *agent.Config) {
			if i == 1 {
				cfg.ApplyBacklogBytes = 1
				cfg.NoFlowControl = true
			}
		}})
	c.Exec(0, `CREATE TABLE t (id bigint PRIMARY KEY, v int)`)
	c.Exec(0, `CREATE TABLE filler (id bigserial PRIMARY KEY, body text)`)
	c.Exec(0, `INSERT INTO t VALUES (1, 0)`)
	c.converge()
	ctx := context.Background()

	tx := c.connectAs(1, "postgres", nil)
	execSQL(t, tx, `BEGIN`)
	execSQL(t, tx, `UPDATE t SET v = 2 WHERE id = 1`)

	resume := c.stopApplier(1)
	c.Exec(0, `UPDATE t SET v = 1 WHERE id = 1`) // conflicts with tx

	wctx, stopWriter := context.WithCancel(ctx)
	var wg sync.WaitGroup
	w := c.connectAs(0, "postgres", nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wctx.Err() == nil {
			w.Exec(ctx, `INSERT INTO filler (body) VALUES (repeat('x', 100))`)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stopWriter(); wg.Wait() }()
	time.Sleep(time.Second)
	t.Logf("replica 2 backlog bytes %d", c.Agents[1].BacklogBytes())

	done := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := tx.Exec(ctx, `COMMIT`)
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	resume()
	err := <-done
	took := time.Since(began)
	t.Logf("COMMIT after %v: %v (SQLSTATE %s)", took, err, pgcode.Of(err))
	if pgcode.Of(err) != pgcode.SerializationFailure || took > 10*time.Second {
		t.Errorf("COMMIT of a transaction the certifier aborts: %v after %v, want 40001 within seconds", err, took)
	}
	stopWriter()
	wg.Wait()
	c.converge()
}

// A write refusal left in the replica's shared memory by an agent that is
// gone (killed while refusing) is lifted by the next agent's start.
func TestAWriteRefusalLeftBehindIsLifted(t *testing.T) {
	c := start(t, 2, clustertest.Options{})
	c.Exec(0, `CREATE TABLE notes (id bigint PRIMARY KEY)`)
	c.converge()
	c.StopAgent(1)
	c.Exec(1, `SELECT tashkent.set_write_refusal('left by an agent that was killed')`)
	c.StartAgent(1)
	client := c.connectAs(1, "postgres", nil)
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err = client.Exec(context.Background(), `INSERT INTO notes VALUES (1)`); err == nil {
			return
		}
	}
	t.Fatalf("a healthy replica still refuses writes 10 s after its agent started: %v", err)
}

// A maintenance session's writes are local, never certified: they go on
// while the replica's apply is stuck and client writes are refused.
func TestMaintenanceWritesGoOnWhileWritesAreRefused(t *testing.T) {
	c := start(t, 2, clustertest.Options{Agent: func(i int, cfg *agent.Config) { cfg.RefuseWritesAfter = time.Second }})
	c.Exec(0, `CREATE TABLE notes (id bigint PRIMARY KEY)`)
	c.converge()
	resume := c.stopApplier(1)
	c.Exec(0, `INSERT INTO notes VALUES (1)`)
	time.Sleep(3 * time.Second)
	m := c.connectAs(1, "postgres", nil)
	execSQL(t, m, `SET tashkent.maintenance = on`)
	_, err := m.Exec(context.Background(), `INSERT INTO notes VALUES (100)`)
	if err != nil {
		t.Errorf("a maintenance write (local, never certified) refused while stuck: %v", err)
	}
	execSQL(t, m, `DELETE FROM notes WHERE id = 100`)
	resume()
	c.converge()
}
