package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// Transactions larger than one log entry stream their writesets from the
// database to the agent, the certifier and the other replicas
// (docs/GUARANTEES.md, "Large transactions"). These tests run them through
// a cluster of real processes and record every process's peak private
// memory while they run, against the bounds docs/OPERATIONS.md documents.
// The scales default to what CI affords; TASHKENT_STREAMED_SCALE and
// TASHKENT_STREAMED_COPY_MIB run them larger (docs/BENCHMARKS.md has the
// figures of pgbench -i -s 100 and a 1 GiB COPY).

// streamedBacklog is the agents' --apply-backlog-bytes in these tests:
// small, so that a writeset several times larger must flow through it.
const streamedBacklog = 32 << 20

// The processes' soft memory limits in these tests (--memory-limit): the
// agents' default, their backlog plus 128 MiB, and the certifier's set
// as low. A process's private memory (RssAnon) may pass its limit by what
// the Go runtime holds outside the heap; a process that held a writeset
// several times larger than its limit would pass it by far more.
const (
	agentMemoryLimit     = streamedBacklog + 128<<20
	certifierMemoryLimit = 128 << 20
	outsideHeapSlack     = 32 << 20
	// The loading backend: tashkent.stream_threshold (8 MB), one fragment
	// and a statement's buffer, plus PostgreSQL's own queue of after-row
	// trigger events (capture is an AFTER ROW trigger): about 16 bytes
	// per row of the statement, kept by PostgreSQL until the statement
	// ends.
	backendMemoryBase   = 40 << 20
	backendBytesPerRow  = 16
	streamedLoadTimeout = 20 * time.Minute
)

func TestLargeTransactionsStreamThroughTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and applies hundreds of MiB; not in -short")
	}
	bin := testbin.Path(t)
	dir, st := newCluster(t, bin, 3, fmt.Sprintf("--agent-arg=--apply-backlog-bytes=%d", streamedBacklog),
		fmt.Sprintf("--certifier-arg=--memory-limit=%d", certifierMemoryLimit))
	t.Run("pgbench -i", func(t *testing.T) { pgbenchInitStreams(t, bin, dir, st) })
	t.Run("COPY", func(t *testing.T) { copyStreams(t, bin, dir, st, envInt(t, "TASHKENT_STREAMED_COPY_MIB", 320)) })
	for _, k := range streamedKills {
		t.Run(k.name, func(t *testing.T) { st = killedMidStream(t, bin, dir, st, k) })
	}
}

// A kill -9 in the middle of a streamed transaction's commit, when the
// certifier's directories show it has come so far (due): its fragments
// being staged (stage/), or its span being copied into the log.
type streamedKill struct {
	name   string
	victim func(st *cluster.State, backend int) int // the PID to kill
	due    func(staged, logGrowth, total int64) bool
	// commits: the victim plays no part in the transaction's commit, which
	// the client must see succeed.
	commits bool
}

var streamedKills = []streamedKill{
	{name: "certifier killed while staging", victim: certifierPID,
		due: func(staged, _, total int64) bool { return staged > total/4 }},
	{name: "certifier killed while logging the span", victim: certifierPID,
		due: func(_, logGrowth, total int64) bool { return logGrowth > total/3 }},
	{name: "origin backend killed while it waits for the decision",
		victim: func(_ *cluster.State, backend int) int { return backend },
		due:    func(_, logGrowth, total int64) bool { return logGrowth > total/3 }},
	{name: "agent of replica2 killed as the span reaches it", victim: func(st *cluster.State, _ int) int { return st.Replicas[1].Agent.PID },
		due: func(_, logGrowth, total int64) bool { return logGrowth > total*9/10 }, commits: true},
}

func certifierPID(st *cluster.State, _ int) int { return st.Certifier.PID }

// stagedBytes is the most any certifier member holds in its stage/
// directory.
func stagedBytes(t *testing.T, st *cluster.State) int64 {
	var most int64
	for _, m := range st.CertifierMembers() {
		most = max(most, dirBytes(t, filepath.Join(m.DataDir, "stage"), ""))
	}
	return most
}

// logMark is where each certifier member's versioned log ended: its
// newest segment file and that file's size.
type logMark map[string]struct {
	segment string
	size    int64
}

func markLogs(t *testing.T, st *cluster.State) logMark {
	m := logMark{}
	for _, c := range st.CertifierMembers() {
		names, sizes := walSegments(c.DataDir)
		if len(names) > 0 {
			m[c.DataDir] = struct {
				segment string
				size    int64
			}{names[len(names)-1], sizes[len(sizes)-1]}
		}
	}
	return m
}

// logGrowth is the most any certifier member's versioned log grew since
// the mark: the bytes of its segments from the marked one on, less the
// marked size (log retention removes older segments meanwhile, never these).
func logGrowth(t *testing.T, st *cluster.State, mark logMark) int64 {
	var most int64
	for _, c := range st.CertifierMembers() {
		names, sizes := walSegments(c.DataDir)
		var grown int64
		for i, name := range names {
			if name >= mark[c.DataDir].segment {
				grown += sizes[i]
			}
		}
		most = max(most, grown-mark[c.DataDir].size)
	}
	return most
}

// walSegments lists dir's versioned-log segment files, in version order
// (their names), with their sizes.
func walSegments(dir string) (names []string, sizes []int64) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".wal") {
			continue
		}
		if info, err := e.Info(); err == nil {
			names, sizes = append(names, e.Name()), append(sizes, info.Size())
		}
	}
	return names, sizes
}

// killedMidStream runs a streamed COPY through replica1, kills k's victim
// when it is due, and has up start what it stopped. The client hears an
// outcome: a commit; an error that says nothing was committed (40001,
// 57P03); or, when its own backend was killed or it gave up waiting
// (08007), an unknown one. Every replica ends with the transaction whole
// or not at all, as the outcome says, and equal.
func killedMidStream(t *testing.T, bin, dir string, st *cluster.State, k streamedKill) *cluster.State {
	const rows, rowBytes = 160 << 10, 1024
	table := fmt.Sprintf("crash_%d", time.Now().UnixNano())
	dsn := st.Replicas[0].DSN()
	query(t, dsn, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, pad text)", table))
	mark := markLogs(t, st)

	result := make(chan error, 1)
	go func() { result <- copyRows(dsn+"&application_name="+table, table, rows, rowBytes) }()
	total := int64(rows * rowBytes)
	backend, victim := 0, 0
	for deadline := time.Now().Add(2 * time.Minute); victim == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if backend == 0 {
			s, _ := tryQuery(dsn, "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE application_name = $1", table)
			backend, _ = strconv.Atoi(s)
			continue
		}
		if k.due(stagedBytes(t, st), logGrowth(t, st, mark), total) {
			if victim = k.victim(st, backend); victim <= 0 {
				victim = 0 // no such process this moment (a group between leaders): look again
				continue
			}
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	if victim == 0 {
		t.Fatalf("the commit never came to the point of the kill (%s)", k.name)
	}
	// A process killed in the middle of its writes exits once the kernel has
	// finished them, which on a busy disk takes seconds.
	if !process.WaitGone(context.Background(), victim, time.Minute) {
		t.Fatalf("pid %d still running a minute after SIGKILL", victim)
	}
	st, err := cluster.Up(context.Background(), cluster.Options{Dir: dir, Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	copyErr := <-result
	code := pgcode.Of(copyErr)
	all, none := strconv.Itoa(rows), "0"
	var want []string
	switch {
	case copyErr == nil:
		want = []string{all}
	case k.commits:
		t.Fatalf("the COPY failed with %v, but the kill (%s) plays no part in its commit", copyErr, k.name)
	case code == pgcode.SerializationFailure || code == pgcode.CannotConnectNow:
		want = []string{none}
	case code == pgcode.TransactionResolutionUnknown || (code == "" && victim == backend):
		want = []string{none, all}
	default:
		t.Fatalf("the COPY ended with %v (SQLSTATE %q), not a commit nor an error that says what happened", copyErr, code)
	}
	version := awaitSameVersion(t, st, streamedLoadTimeout)
	counts := map[string]bool{}
	for _, r := range st.Replicas {
		counts[query(t, r.DSN(), "SELECT count(*) FROM "+table)] = true
	}
	if len(counts) != 1 || !slices.ContainsFunc(want, func(w string) bool { return counts[w] }) {
		t.Fatalf("after the COPY ended with %v: row counts on the replicas %v, want one of %v on every one", copyErr, counts, want)
	}
	mustRun(t, bin, "verify", "--data-dir", dir)
	t.Logf("%s: the COPY ended with %v (SQLSTATE %q); every replica at version %d with the same rows (%v)", k.name, copyErr, code, version, counts)
	return st
}

// copyRows loads rows of rowBytes into table with one COPY FROM STDIN,
// generated by the client as a bulk load from a file would be.
func copyRows(dsn, table string, rows, rowBytes int) error {
	ctx, cancel := context.WithTimeout(context.Background(), streamedLoadTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<20)
		pad := strings.Repeat("x", rowBytes-24)
		for i := 1; i <= rows; i++ {
			fmt.Fprintf(w, "%d\t%s\n", i, pad)
		}
		w.Flush()
		pw.Close()
	}()
	_, err = conn.PgConn().CopyFrom(ctx, pr, "COPY "+table+" FROM STDIN")
	return err
}

// dirBytes is the size of the files in dir whose names end in suffix.
func dirBytes(t *testing.T, dir, suffix string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() && strings.HasSuffix(e.Name(), suffix) {
			n += info.Size()
		}
	}
	return n
}

func pgbenchInitStreams(t *testing.T, bin, dir string, st *cluster.State) {
	scale := envInt(t, "TASHKENT_STREAMED_SCALE", 32)
	mem := watchMemory(t, st)
	backend := mem.watchBackendOf(st.Replicas[0].DSN(), "pgbench")
	stopReads := readLoop(t, st.Replicas[1].DSN(), "SELECT count(*) FROM pg_catalog.pg_class")

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), streamedLoadTimeout)
	defer cancel()
	pgbench := filepath.Join(pgBinDir(t), "pgbench")
	out, err := exec.CommandContext(ctx, pgbench, "-i", "-s", strconv.Itoa(scale), st.Replicas[0].DSN()).CombinedOutput()
	loaded := time.Since(start)
	reads := stopReads()
	if err != nil {
		t.Fatalf("pgbench -i -s %d through replica1: %v\n%s", scale, err, out)
	}
	version := awaitSameVersion(t, st, streamedLoadTimeout)
	applied := time.Since(start)
	peaks := mem.stop()

	want := strconv.Itoa(scale * 100000)
	for _, r := range st.Replicas {
		if got := query(t, r.DSN(), "SELECT count(*) FROM pgbench_accounts"); got != want {
			t.Errorf("%s has %s accounts, want %s", r.Name, got, want)
		}
	}
	mustRun(t, bin, "verify", "--data-dir", dir)
	writeset := writesetBytes(t, st.Replicas[0].DSN())
	t.Logf("pgbench -i -s %d: loaded through replica1 in %s (%d reads on replica2 meanwhile), every replica at version %d after %s; about %d MiB of rows",
		scale, loaded.Round(time.Millisecond), reads, version, applied.Round(time.Millisecond), writeset>>20)
	checkMemory(t, peaks, *backend, scale*100000, writeset)
}

func copyStreams(t *testing.T, bin, dir string, st *cluster.State, mib int) {
	dsn := st.Replicas[0].DSN()
	query(t, dsn, "CREATE TABLE wide (id bigint PRIMARY KEY, pad text)")
	mem := watchMemory(t, st)
	backend := mem.watchBackendOf(dsn, "tashkent-copy")

	const rowBytes = 1024
	rows := mib << 20 / rowBytes
	start := time.Now()
	if err := copyRows(dsn+"&application_name=tashkent-copy", "wide", rows, rowBytes); err != nil {
		t.Fatalf("COPY of %d MiB through replica1: %v", mib, err)
	}
	loaded := time.Since(start)
	version := awaitSameVersion(t, st, streamedLoadTimeout)
	applied := time.Since(start)
	peaks := mem.stop()
	for _, r := range st.Replicas {
		if got := query(t, r.DSN(), "SELECT count(*) FROM wide"); got != strconv.Itoa(rows) {
			t.Errorf("%s has %s rows, want %d", r.Name, got, rows)
		}
	}
	mustRun(t, bin, "verify", "--data-dir", dir)
	t.Logf("COPY of %d MiB (%d rows): committed through replica1 in %s, every replica at version %d after %s",
		mib, rows, loaded.Round(time.Millisecond), version, applied.Round(time.Millisecond))
	checkMemory(t, peaks, *backend, rows, int64(mib)<<20)
}

// checkMemory compares the peaks with the documented bounds, each of
// which is meaningful only if it is below the writeset's size.
func checkMemory(t *testing.T, peaks map[string]int64, backend int64, rows int, writeset int64) {
	t.Helper()
	bounds := map[string]int64{"certifier": certifierMemoryLimit + outsideHeapSlack}
	for name := range peaks {
		switch {
		case strings.HasSuffix(name, " agent"):
			bounds[name] = agentMemoryLimit + outsideHeapSlack
		case strings.HasPrefix(name, "certifier "):
			delete(bounds, "certifier")
			bounds[name] = certifierMemoryLimit + outsideHeapSlack
		}
	}
	for name, bound := range bounds {
		peak, ok := peaks[name]
		switch {
		case !ok:
			t.Errorf("no memory figure for the %s", name)
		case peak > bound:
			t.Errorf("the %s held %d MiB of private memory during a %d MiB writeset, over its bound of %d MiB", name, peak>>20, writeset>>20, bound>>20)
		default:
			t.Logf("%s: peak %d MiB of private memory (bound %d MiB)", name, peak>>20, bound>>20)
		}
	}
	bound := int64(backendMemoryBase + backendBytesPerRow*rows)
	switch {
	case backend == 0:
		t.Error("the loading backend's memory was never read")
	case backend > bound:
		t.Errorf("the loading backend held %d MiB of private memory, over its bound of %d MiB", backend>>20, bound>>20)
	default:
		t.Logf("loading backend: peak %d MiB of private memory (bound %d MiB)", backend>>20, bound>>20)
	}
}

// memoryWatch samples the private memory (RssAnon) of the cluster's
// tashkent processes, and of one backend, every 100 ms.
type memoryWatch struct {
	t     *testing.T
	pids  map[string]int
	mu    sync.Mutex
	peaks map[string]int64
	done  chan struct{}
	wg    sync.WaitGroup
}

func watchMemory(t *testing.T, st *cluster.State) *memoryWatch {
	m := &memoryWatch{t: t, pids: map[string]int{}, peaks: map[string]int64{}, done: make(chan struct{})}
	for _, c := range st.CertifierMembers() {
		m.pids[certifierName(c)] = c.PID
	}
	for _, r := range st.Replicas {
		m.pids[r.Name+" agent"] = r.Agent.PID
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for m.sleep() {
			for name, pid := range m.pids {
				m.note(name, pid)
			}
		}
	}()
	return m
}

// certifierName names a certifier in memory figures: "certifier", or
// "certifier N" for member N of a group.
func certifierName(c *cluster.Certifier) string {
	if c.ID == 0 {
		return "certifier"
	}
	return fmt.Sprintf("certifier %d", c.ID)
}

func (m *memoryWatch) sleep() bool {
	select {
	case <-m.done:
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}

func (m *memoryWatch) note(name string, pid int) {
	if kb, err := rssAnonKB(pid); err == nil {
		m.mu.Lock()
		m.peaks[name] = max(m.peaks[name], kb<<10)
		m.mu.Unlock()
	}
}

// watchBackendOf samples the backend of the session on dsn whose
// application_name is app, once it appears; the result is read after stop.
func (m *memoryWatch) watchBackendOf(dsn, app string) *int64 {
	peak := new(int64)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		pid := 0
		for m.sleep() {
			if pid == 0 {
				s, err := tryQuery(dsn, "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE application_name = $1", app)
				if err == nil {
					pid, _ = strconv.Atoi(s)
				}
				continue
			}
			if kb, err := rssAnonKB(pid); err == nil {
				*peak = max(*peak, kb<<10)
			}
		}
	}()
	return peak
}

func (m *memoryWatch) stop() map[string]int64 {
	close(m.done)
	m.wg.Wait()
	return m.peaks
}

func rssAnonKB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no RssAnon in /proc/%d/status", pid)
}

// awaitSameVersion waits until every replica has applied the certifier's
// durable version, and returns it.
func awaitSameVersion(t *testing.T, st *cluster.State, limit time.Duration) uint64 {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		versions := make([]uint64, len(st.Replicas))
		same := true
		for i, r := range st.Replicas {
			s, err := tryQuery(r.DSN(), "SELECT tashkent.committed_version()")
			if err == nil {
				versions[i], _ = strconv.ParseUint(s, 10, 64)
			}
			same = same && err == nil && versions[i] == versions[0]
		}
		if same && versions[0] > 0 {
			return versions[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas did not reach one version within %s: %v", limit, versions)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writesetBytes estimates the rows' size in their text form, as they
// travel.
func writesetBytes(t *testing.T, dsn string) int64 {
	s := query(t, dsn, "SELECT sum(length(a::text)) FROM pgbench_accounts a")
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// readLoop is pgtest.ReadWhile on a connection of its own to dsn.
func readLoop(t *testing.T, dsn, sql string) func() int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	stop := pgtest.ReadWhile(t, conn, sql)
	return func() int {
		n := stop()
		conn.Close(context.Background())
		return n
	}
}

func pgBinDir(t *testing.T) string {
	dir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
