package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// A copy holds every unlogged table empty (pg_basebackup copies none of
// their rows), while tashkent replicates them: add and rebuild refuse
// while the donor has unlogged tables with rows, name them and say what
// to do; --empty-unlogged copies anyway, with the tables empty; once the
// table is logged, the rebuild copies its rows.
func TestReplicaCopyRefusesUnloggedTablesWithRows(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	execOn(t, r1.DSN(),
		"CREATE UNLOGGED TABLE cache (k int PRIMARY KEY, v text)",
		"INSERT INTO cache SELECT g, 'v' FROM generate_series(1, 100) g",
		"CREATE UNLOGGED TABLE scratch (k int PRIMARY KEY)")
	eventually(t, r2.DSN(), "SELECT count(*)::text FROM cache", "100")

	for _, args := range [][]string{{"add", "--data-dir", dir}, {"rebuild", "--data-dir", dir, "--donor", "1", "2"}} {
		out, err := run(t, bin, append([]string{"replica"}, args...)...)
		if err == nil {
			t.Fatalf("replica %s copied a donor with an unlogged table with rows", args[0])
		}
		for _, want := range []string{"unlogged tables with rows: public.cache.", "ALTER TABLE public.cache SET LOGGED", "--empty-unlogged"} {
			if !strings.Contains(out, want) {
				t.Errorf("replica %s refused without saying %q", args[0], want)
			}
		}
		if strings.Contains(out, "scratch") || strings.Contains(out, "copying the data directory") {
			t.Errorf("replica %s named an empty unlogged table or began to copy", args[0])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "replica3")); !os.IsNotExist(err) {
		t.Errorf("a refused add left DIR/replica3: %v", err)
	}
	if s := status(t, bin, dir); !s.Healthy || s.Replicas[1].Rebuilt != nil {
		t.Errorf("after the refused add and rebuild: healthy %v, replica2 rebuilt %+v", s.Healthy, s.Replicas[1].Rebuilt)
	}

	mustRun(t, bin, "replica", "add", "--data-dir", dir, "--donor", "1", "--empty-unlogged")
	if n := query(t, load(t, dir).ReplicaByIndex(3).DSN(), "SELECT count(*)::text FROM cache"); n != "0" {
		t.Errorf("a copy taken with --empty-unlogged holds %s rows of the unlogged table, want 0 (pg_basebackup copies none)", n)
	}
	mustRun(t, bin, "replica", "remove", "--data-dir", dir, "--delete-data", "3")

	query(t, r1.DSN(), "ALTER TABLE cache SET LOGGED")
	eventually(t, r2.DSN(), "SELECT relpersistence::text FROM pg_class WHERE relname = 'cache'", "p")
	mustRun(t, bin, "replica", "rebuild", "--data-dir", dir, "--donor", "1", "2")
	if n := query(t, r2.DSN(), "SELECT count(*)::text FROM cache"); n != "100" {
		t.Errorf("replica2 rebuilt once the table is logged holds %s of its rows, want 100", n)
	}
}

// A sequence that no column owns, called by a table's default, does not
// hand out again, after a rebuild or on a replica that reuses a removed
// replica's index, the values that replica handed out: the copy's
// sequence is the donor's, and the alignment looks past the column whose
// default calls it.
func TestAnUnownedSequenceDoesNotRepeatAfterARebuildOrAReusedIndex(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2)
	r1, r2 := st.ReplicaByIndex(1), st.ReplicaByIndex(2)
	execOn(t, r1.DSN(), "CREATE SEQUENCE s", "CREATE TABLE t (id bigint PRIMARY KEY DEFAULT nextval('s'), v text)")
	eventually(t, r2.DSN(), "SELECT count(*)::text FROM pg_tables WHERE tablename = 't'", "1")
	insert := func(r *cluster.Replica, n int) {
		t.Helper()
		for i := range n {
			if _, err := tryQuery(r.DSN(), "INSERT INTO t (v) VALUES ($1) RETURNING id", r.Name); err != nil {
				t.Fatalf("insert %d of %d on %s: %v", i+1, n, r.Name, err)
			}
		}
	}
	insert(r2, 20)
	insert(r1, 3)

	mustRun(t, bin, "replica", "rebuild", "--data-dir", dir, "--donor", "1", "2")
	r2 = load(t, dir).ReplicaByIndex(2)
	insert(r2, 20)

	mustRun(t, bin, "replica", "remove", "--data-dir", dir, "--delete-data", "2")
	insert(r1, 3)
	mustRun(t, bin, "replica", "add", "--data-dir", dir, "--donor", "1")
	r2 = load(t, dir).ReplicaByIndex(2)
	if r2 == nil {
		t.Fatal("the added replica did not take the free index 2")
	}
	insert(r2, 20)
	if n := query(t, r2.DSN(), "SELECT count(*)::text FROM t"); n != "66" {
		t.Errorf("t holds %s rows on replica2, want 66", n)
	}
}

// A copy that the target's file system has no room for is refused before
// anything is copied, with the numbers; given room, it runs. The cluster
// lives on a tmpfs whose size the test sets.
func TestReplicaCopyRefusesWithoutRoom(t *testing.T) {
	bin := testbin.Path(t)
	dir := newClusterDir(t, "tashkent-replica-test-")
	mountTmpfs(t, dir, 512<<20)
	dir, st := newClusterIn(t, bin, dir, 2)
	loadBulk(t, st)

	resizeTmpfs(t, dir, usedBytes(t, dir)+32<<20)
	out, err := run(t, bin, "replica", "add", "--data-dir", dir, "--donor", "1")
	if err == nil {
		t.Fatal("replica add copied into a file system with 32 MiB free")
	}
	for _, want := range []string{"not enough free space for a copy of replica1 in " + dir, "free, the copy needs about", "its databases, "} {
		if !strings.Contains(out, want) {
			t.Errorf("replica add without room does not say %q", want)
		}
	}
	if strings.Contains(out, "copying the data directory") {
		t.Error("replica add without room began to copy")
	}
	if _, err := os.Stat(filepath.Join(dir, "replica3")); !os.IsNotExist(err) {
		t.Errorf("a refused add left DIR/replica3: %v", err)
	}

	resizeTmpfs(t, dir, usedBytes(t, dir)+384<<20)
	mustRun(t, bin, "replica", "add", "--data-dir", dir, "--donor", "1")
}

// mountTmpfs mounts a tmpfs of size bytes on dir, unmounted when the test
// ends (after the cluster's cleanup, registered later, has stopped it).
func mountTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk,mode=0755", size>>10), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v\n%s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
			return
		}
		os.Remove(dir)
	})
}

// resizeTmpfs sets the size of the tmpfs on dir.
func resizeTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%dk", size>>10), dir).CombinedOutput(); err != nil {
		t.Fatalf("resize the tmpfs on %s: %v\n%s", dir, err, out)
	}
}

// usedBytes is what the file system holding dir has in use.
func usedBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	return int64(fs.Blocks-fs.Bfree) * int64(fs.Bsize)
}

// A donor that stops serving while it is copied (here its agent halts)
// may have been copied with changes of its own: the copy is discarded,
// nothing is recorded, and the command says why.
func TestACopyOfADonorThatStoppedServingIsDiscarded(t *testing.T) {
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 2, "--auto-rebuild=false")
	query(t, st.Replicas[0].DSN(), "CREATE TABLE halt_me (id int PRIMARY KEY)")
	loadBulk(t, st)
	eventually(t, st.Replicas[1].DSN(), "SELECT count(*)::text FROM pg_tables WHERE tablename = 'halt_me'", "1")

	add, out := startAdd(t, bin, dir, "--donor", "1", "--max-rate", "4M")
	awaitJoining(t, bin, dir, func(j cluster.TransferStatus) bool { return j.Running && j.BytesDone >= 2<<20 })
	haltReplica(t, st, 1)
	awaitAgentHealth(t, bin, dir, 1, func(h string) bool { return strings.HasPrefix(h, "halted") })
	if err := add.Wait(); err == nil {
		t.Fatalf("replica add from a donor that halted while it was copied succeeded:\n%s", out.String())
	}
	t.Logf("replica add whose donor halted:\n%s", out.String())
	if !strings.Contains(out.String(), "replica1 stopped serving while it was copied") || !strings.Contains(out.String(), "the copy is discarded") {
		t.Errorf("replica add does not say that the donor stopped serving and the copy was discarded")
	}
	checkNotServed(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "replica3", "pgdata.transfer")); !os.IsNotExist(err) {
		t.Errorf("the discarded copy is still there: %v", err)
	}
}
