package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A replica that was down for longer than the certifier's log keeps what
// it needs comes back by state transfer: status shows it behind the log;
// `up` starts its agent, which the certifier refuses (needs state
// transfer), and the supervisor rebuilds it from a peer while clients
// write on the other replica; it ends with the others' contents and every acknowledged
// commit. The certifier keeps a window of 64 versions in segments of 1
// MiB, and a replica away for 2 s no longer holds the log. With a single
// certifier, and with a group of three, whose leader decides for all.
func TestAReplicaDownLongerThanTheLogKeepsComesBackByStateTransfer(t *testing.T) {
	bin := testbin.Path(t)
	for _, certifiers := range []string{"1", "3"} {
		t.Run("certifiers="+certifiers, func(t *testing.T) {
			testStateTransferAfterRetention(t, bin, "--certifiers", certifiers)
		})
	}
}

func testStateTransferAfterRetention(t *testing.T, bin string, extra ...string) {
	dir, st := newCluster(t, bin, 2, append([]string{"--certifier-arg=--window-versions=64", "--certifier-arg=--segment-mib=1",
		"--certifier-arg=--log-retention-replica-timeout=2s"}, extra...)...)
	setupTable(t, st)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	query(t, r1.DSN(), "CREATE TABLE padded (id int PRIMARY KEY, pad text)")
	eventually(t, r2.DSN(), "SELECT count(*)::text FROM pg_tables WHERE tablename = 'padded'", "1")
	down := replicaVersion(t, r2)
	stopReplica(t, r2)

	w := &groupWorkload{acked: map[int]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { paddedInserts(ctx, t, r1.DSN(), w, 1) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	deadline := time.Now().Add(2 * time.Minute)
	for {
		s := status(t, bin, dir)
		if l := s.Certifier.Log; l != nil && l.FirstVersion > down+1 && slices.Contains(l.BehindLog, "replica2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the certifier's log still holds what replica2 (down at version %d) needs after two minutes: %+v", down, s.Certifier.Log)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if table := mustRun(t, bin, "status", "--data-dir", dir); !strings.Contains(table, "replica2: needs versions the certifier's log no longer holds") ||
		!strings.Contains(table, "  log ") {
		t.Errorf("status does not show the log and the replica behind it:\n%s", table)
	}

	out := mustRun(t, bin, "up", "--data-dir", dir, "--no-demo")
	if !strings.Contains(out, "replica2: HALTED (needs state transfer") || !strings.Contains(out, "the supervisor rebuilds it") {
		t.Errorf("up did not say that replica2 needs a state transfer, which the supervisor makes:\n%s", out)
	}
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool {
		return strings.HasPrefix(h, "serving") && load(t, dir).ReplicaByIndex(2).Rebuilt != nil
	})
	s := awaitHealthy(t, bin, dir)
	if b := s.Replicas[1].Rebuilt; b == nil || !b.Automatic || !strings.Contains(b.Reason, "needs state transfer") {
		t.Fatalf("replica2 after up: rebuilt %+v, want an automatic rebuild saying it needs a state transfer", b)
	}
	time.Sleep(time.Second) // writes go on while the rebuilt replica serves
	cancel()
	wg.Wait()
	if w.count() < 100 {
		t.Fatalf("only %d commits acknowledged (last error %v): the workload did not run", w.count(), w.lastErr)
	}
	checkConverged(t, load(t, dir), w)
}

// A replica whose agent is paused (SIGSTOP) while the others write more
// than the certifier's log may hold (--log-retention-bytes) is cut off
// although its session is open; once the agent runs again and has read
// what its stream held, it finds the versions it needs gone, halts, and
// the supervisor rebuilds it from a peer. It ends with the others'
// contents and every acknowledged commit. The certifier serves the last
// --recent-entries versions from memory whatever its log keeps: 1,024.
func TestAReplicaPausedPastTheLogBoundIsRebuiltByTheSupervisor(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2, "--certifier-arg=--window-versions=64", "--certifier-arg=--segment-mib=1",
		"--certifier-arg=--log-retention-bytes=2097152", "--certifier-arg=--recent-entries=1024")
	setupTable(t, st)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	query(t, r1.DSN(), "CREATE TABLE padded (id int PRIMARY KEY, pad text)")
	eventually(t, r2.DSN(), "SELECT count(*)::text FROM pg_tables WHERE tablename = 'padded'", "1")
	paused := replicaVersion(t, r2)
	if err := syscall.Kill(r2.Agent.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := sync.OnceFunc(func() { syscall.Kill(r2.Agent.PID, syscall.SIGCONT) })
	defer resume()

	// Large writes until the log has let go of more than the paused
	// agent's stream can hold (its gRPC windows, 40 MiB: 10,000 versions
	// of 4 kB), then small ones while replica2 is rebuilt: a log of 2 MiB
	// holds less than a second of the large ones, less than a copy takes.
	w := &groupWorkload{acked: map[int]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { paddedInserts(ctx, t, r1.DSN(), w, 1) })
	deadline := time.Now().Add(3 * time.Minute)
	for {
		s := status(t, bin, dir)
		if l := s.Certifier.Log; l != nil && l.FirstVersion > paused+20_000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the certifier's log did not let go of 20,000 versions after replica2's within three minutes: %+v", s.Certifier.Log)
		}
		time.Sleep(500 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	ctx, cancel = context.WithCancel(context.Background())
	wg.Go(func() { w.run(ctx, t, r1.DSN(), 2) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	resume()
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool {
		return strings.HasPrefix(h, "serving") && load(t, dir).ReplicaByIndex(2).Rebuilt != nil
	})
	s := awaitHealthy(t, bin, dir)
	if b := s.Replicas[1].Rebuilt; b == nil || !b.Automatic || !strings.Contains(b.Reason, "needs state transfer") {
		t.Fatalf("replica2: rebuilt %+v, want an automatic rebuild saying it needs a state transfer", b)
	}
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
	checkConverged(t, load(t, dir), w)
}

// replicaVersion reads replica r's version.
func replicaVersion(t *testing.T, r *cluster.Replica) uint64 {
	t.Helper()
	v, err := readReplicaVersion(r)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readReplicaVersion reads replica r's version on a new connection.
func readReplicaVersion(r *cluster.Replica) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.DSN())
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	return cluster.ReadVersion(ctx, conn)
}

// stopReplica stops r's agent (SIGKILL) and PostgreSQL (a fast shutdown),
// as a machine taken down would.
func stopReplica(t *testing.T, r *cluster.Replica) {
	t.Helper()
	if err := syscall.Kill(r.Agent.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgserver.StopPID(ctx, r.Postgres.DataDir, r.Postgres.PID); err != nil {
		t.Fatal(err)
	}
	for process.Alive(r.Agent.PID) {
		if ctx.Err() != nil {
			t.Fatalf("agent %d still alive after SIGKILL", r.Agent.PID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// paddedInserts commits, on replica k, transactions that each insert a
// row into rows and 4 kB into padded, recording the acknowledged ones: a
// log of a few MiB in a few seconds.
func paddedInserts(ctx context.Context, t *testing.T, dsn string, w *groupWorkload, k int) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("connect to replica %d: %v", k, err)
		}
		return
	}
	defer conn.Close(context.Background())
	for seq := 1; ctx.Err() == nil; seq++ {
		id := k*10_000_000 + seq
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO rows VALUES ($1, $2)", id, seq); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO padded VALUES ($1, $2)", id, strings.Repeat(fmt.Sprintf("%x", id), 4096)[:4096])
			return err
		})
		var pgErr *pgconn.PgError
		w.mu.Lock()
		switch {
		case err == nil:
			w.acked[id] = true
		case errors.As(err, &pgErr) && pgErr.Code == pgcode.SerializationFailure:
			w.aborts++
		case ctx.Err() == nil:
			w.unknown++
			w.lastErr = err
		}
		w.mu.Unlock()
		if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == pgcode.SerializationFailure) {
			if ctx.Err() == nil {
				t.Errorf("replica %d: %v", k, err)
			}
			return
		}
	}
}
