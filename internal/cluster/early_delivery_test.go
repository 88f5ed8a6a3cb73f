package cluster_test

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A replica that applied a version the certifier lost is found by its
// history and refused: it never serves a history that is not a prefix of
// the log (Eventual Durability §2.2.3: durability is a prefix; a version
// decided but never durable fails, and with it every later one). The
// certifier delivers entries before they are durable and waits a second
// before writing each batch (hidden fault flags), so replica2, which
// applies replica1's commits, holds versions that are not durable yet.
// kill -9 of the certifier loses them; its next generation would number
// new transactions from the same versions. replica2's agent sends its
// history, the certifier finds that it agrees with the log only below
// replica2's version, and refuses it with both histories named.
//
// Nothing rewinds such a replica yet, and every replica holds the failed
// versions (replica1's own abandoned commit is applied there too), so no
// donor exists for a rebuild: the replicas stay halted.
func TestReplicasThatAppliedVersionsTheCertifierLostAreRefused(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2, "--auto-rebuild=false",
		"--certifier-arg=--unsafe-deliver-before-durable", "--certifier-arg=--unsafe-fault-write-delay=1s")
	setupTable(t, st)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	eventually(t, r2.DSN(), "SELECT count(*)::text FROM hot", "10")

	w := &groupWorkload{acked: map[int]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx, t, r1.DSN(), 1) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	held, durable := awaitUndurableVersion(t, st, r2)
	if err := syscall.Kill(st.Certifier.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	process.WaitGone(context.Background(), st.Certifier.PID, 5*time.Second)
	t.Logf("kill -9 of the certifier while replica2 held version %d, durable %d", held, durable)

	mustRun(t, bin, "up", "--data-dir", dir, "--no-demo")
	awaitAgentHealth(t, bin, dir, 2, func(h string) bool {
		return strings.HasPrefix(h, "halted: needs state transfer") && strings.Contains(h, "agrees with the certifier's log only up to version") &&
			strings.Contains(h, "replica's epochs [") && strings.Contains(h, "the log's epochs [")
	})
	cancel()
	wg.Wait()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	rep, err := cluster.QueryCertifier(ctx2, load(t, dir).CertifierAddr())
	if err != nil {
		t.Fatal(err)
	}
	if v := replicaVersion(t, r2); v <= rep.DurableVersion {
		t.Fatalf("replica2 is at version %d and the certifier's durable version is %d: it held no lost version", v, rep.DurableVersion)
	}
}

// awaitUndurableVersion waits until replica r holds a version above the
// certifier's durable one and returns both.
func awaitUndurableVersion(t *testing.T, st *cluster.State, r *cluster.Replica) (held, durable uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		v := replicaVersion(t, r) // first: durable only grows
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		rep, err := cluster.QueryCertifier(ctx, st.CertifierAddr())
		cancel()
		if err == nil && v > rep.DurableVersion {
			return v, rep.DurableVersion
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never held a version the certifier had not made durable", r.Name)
	return 0, 0
}
