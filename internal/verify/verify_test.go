package verify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/verify"
)

const schema = `
CREATE TABLE acct (id int PRIMARY KEY, owner text, balance numeric);
INSERT INTO acct SELECT g, 'owner ' || g, g * 1.5 FROM generate_series(1, 2000) g;
CREATE TABLE audit (at timestamptz, what text);
INSERT INTO audit SELECT '2026-01-01'::timestamptz + g * interval '1 minute', 'event ' || (g % 7) FROM generate_series(1, 300) g;
`

func replicas(c *clustertest.Cluster) []verify.Replica {
	var rs []verify.Replica
	for i, db := range c.DBs {
		rs = append(rs, verify.Replica{Name: fmt.Sprintf("replica%d", i+1), DSN: db.DSN("postgres")})
	}
	return rs
}

// writeUntil updates random accounts on replica i until stop is closed,
// retrying what certification aborts.
func writeUntil(t *testing.T, c *clustertest.Cluster, i int, stop <-chan struct{}, wg *sync.WaitGroup) {
	conn := c.Connect(i)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := conn.Exec(context.Background(), `UPDATE acct SET balance = balance + 1 WHERE id = $1`, rand.IntN(2000)+1)
			var pgErr *pgconn.PgError
			if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == pgcode.SerializationFailure) {
				t.Errorf("replica%d: %v", i+1, err)
				return
			}
		}
	}()
}

// While two replicas take writes, verify compares all three at one
// version and finds them equal; rows changed on one replica with the
// maintenance switch are then named, by primary key (and by the row in a
// table without one), with that replica as the odd one out.
func TestVerifyFindsPlantedDifferencesUnderWrites(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	c.Exec(0, schema)
	c.AwaitConverged(time.Minute)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	writeUntil(t, c, 0, stop, &wg)
	writeUntil(t, c, 1, stop, &wg)
	defer func() { close(stop); wg.Wait() }()

	ctx := context.Background()
	before := c.Committed(0)
	r, err := verify.Run(ctx, verify.Options{Replicas: replicas(c)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Differences() != 0 || len(r.Tables) != 2 || r.Version <= before {
		t.Fatalf("under writes: %d differences in %d tables at version %d (before: %d), want 0 in 2 after it: %+v",
			r.Differences(), len(r.Tables), r.Version, before, r.Tables)
	}

	c.Exec(2, `SET tashkent.maintenance = on;
UPDATE acct SET owner = 'someone else' WHERE id = 7;
DELETE FROM acct WHERE id = 1999;
INSERT INTO audit SELECT * FROM audit WHERE what = 'event 3' LIMIT 1;`)
	r, err = verify.Run(ctx, verify.Options{Replicas: replicas(c)})
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]verify.TableReport{}
	for _, tr := range r.Tables {
		tables[tr.Name] = tr
	}
	acct, audit := tables["public.acct"], tables["public.audit"]
	if r.Differences() != 2 || acct.DiffsFound != 2 || audit.DiffsFound != 1 {
		t.Fatalf("planted 2 rows in acct and 1 in audit; found %d tables differing, acct %d rows, audit %d rows: %+v",
			r.Differences(), acct.DiffsFound, audit.DiffsFound, r.Tables)
	}
	var keys []string
	for _, d := range acct.Diffs {
		keys = append(keys, d.Key)
		if !slices.Equal(d.Odd, []string{"replica3"}) {
			t.Errorf("acct key %s: odd replicas %v, want [replica3]", d.Key, d.Odd)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"(1999)", "(7)"}) {
		t.Errorf("acct: differing keys %v, want (1999) and (7)", keys)
	}
	if d := audit.Diffs[0]; !audit.Keyless || d.Values[2] != "2" || d.Values[0] != "1" || !slices.Equal(d.Odd, []string{"replica3"}) {
		t.Errorf("audit: %+v, want the duplicated row, 2 copies on replica3 and 1 elsewhere", audit)
	}
}

// A hold keeps the replica's commits after its version, local and remote,
// until it is released; one session holds at a time; the hold ends with
// its session; only superusers may hold.
func TestHoldCommits(t *testing.T) {
	c := clustertest.Start(t, 2, clustertest.Options{})
	c.Exec(0, `CREATE TABLE t (id int PRIMARY KEY)`)
	c.AwaitConverged(time.Minute)
	ctx := context.Background()

	holder := c.Connect(0)
	var held uint64
	if err := holder.QueryRow(ctx, `SELECT tashkent.hold_commits(0, 20000)`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if got := c.Committed(0); got != held {
		t.Fatalf("hold_commits returned %d, replica1 is at %d", held, got)
	}

	local := commitAsync(c.Connect(0), `INSERT INTO t VALUES (1)`)
	c.Exec(1, `INSERT INTO t VALUES (2)`) // replica2 is not held
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-local:
		t.Fatalf("a local commit returned while commits were held (err %v)", err)
	default:
	}
	if got := c.Committed(0); got != held {
		t.Fatalf("replica1 moved to version %d while held after %d", got, held)
	}

	other := c.Connect(0)
	_, err := other.Exec(ctx, `SELECT tashkent.hold_commits(0, 1000)`)
	if code := pgcode.Of(err); code != pgcode.ObjectInUse {
		t.Errorf("a second session's hold: %v (SQLSTATE %q), want 55006", err, code)
	}

	if _, err := holder.Exec(ctx, `SELECT tashkent.release_commits()`); err != nil {
		t.Fatal(err)
	}
	if err := <-local; err != nil {
		t.Fatalf("the local commit after the release: %v", err)
	}
	c.AwaitConverged(time.Minute)

	// A hold ends with its session.
	if err := other.QueryRow(ctx, `SELECT tashkent.hold_commits(0, 60000)`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	local = commitAsync(c.Connect(0), `INSERT INTO t VALUES (3)`)
	other.Close(ctx)
	select {
	case err := <-local:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a commit still waits 30 s after the holding session ended")
	}

	c.Exec(0, `CREATE ROLE plain LOGIN`)
	c.AwaitConverged(time.Minute)
	plain, err := c.ConnectAs(0, "plain")
	if err != nil {
		t.Fatal(err)
	}
	_, err = plain.Exec(ctx, `SELECT tashkent.hold_commits(0, 1000)`)
	if code := pgcode.Of(err); code != pgcode.InsufficientPrivilege {
		t.Errorf("an ordinary role's hold: %v (SQLSTATE %q), want 42501", err, code)
	}
}

func commitAsync(conn *pgx.Conn, sql string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), sql)
		done <- err
	}()
	return done
}

// An agent given --verify-every compares its replica with its peers on
// its own; the metrics show the last result, a planted difference
// included.
func TestAgentVerifiesPeriodically(t *testing.T) {
	c := clustertest.Start(t, 2, clustertest.Options{})
	c.StopAgent(0)
	cfg := c.Config(0)
	cfg.VerifyEvery = 200 * time.Millisecond
	cfg.VerifyPeers = []verify.Replica{{Name: "replica2", DSN: c.DBs[1].DSN("postgres")}}
	cfg.MetricsAddr = "127.0.0.1:0"
	select {
	case <-c.RunAgent(0, cfg).Ready():
	case <-time.After(clustertest.AgentStartLimit):
		t.Fatal("agent 1 did not serve again")
	}
	c.Exec(0, schema)
	c.AwaitConverged(time.Minute)
	metrics := "http://" + c.Agents[0].MetricsAddr().String() + "/metrics"
	awaitMetric(t, metrics, `tashkent_agent_verify_runs_total{result="equal"}`, func(v float64) bool { return v >= 1 })

	c.Exec(1, `SET tashkent.maintenance = on; DELETE FROM acct WHERE id = 5`)
	awaitMetric(t, metrics, `tashkent_agent_verify_differing_tables`, func(v float64) bool { return v == 1 })
	awaitMetric(t, metrics, `tashkent_agent_verify_runs_total{result="differ"}`, func(v float64) bool { return v >= 1 })
}

// awaitMetric waits until the sample named (with its labels) satisfies ok.
func awaitMetric(t *testing.T, url, sample string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := "not scraped"
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				value, found := strings.CutPrefix(line, sample+" ")
				if !found {
					continue
				}
				last = value
				if v, err := strconv.ParseFloat(value, 64); err == nil && ok(v) {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: last value %s after a minute", sample, last)
}

// A row is hashed whole even when a column is named like the alias the
// queries give the table.
func TestVerifyHashesWholeRowsWhateverTheColumnNames(t *testing.T) {
	c := clustertest.Start(t, 2, clustertest.Options{})
	c.Exec(0, `CREATE TABLE keyed (id int PRIMARY KEY, t int, payload text);
INSERT INTO keyed SELECT g, g, 'p' FROM generate_series(1, 50) g;
CREATE TABLE loose (t int, x text);
INSERT INTO loose SELECT g, 'x' FROM generate_series(1, 50) g;`)
	c.AwaitConverged(time.Minute)
	c.Exec(1, `SET tashkent.maintenance = on;
UPDATE keyed SET payload = 'changed' WHERE id = 3;
UPDATE loose SET x = 'changed' WHERE t = 4;`)
	r, err := verify.Run(context.Background(), verify.Options{Replicas: replicas(c)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range r.Tables {
		if tr.Equal() {
			t.Errorf("%s reported equal although a row's other column differs", tr.Name)
		}
	}
}

// A local transaction certified after the hold waits for its turn where
// the lock watch sees it: holding a row lock that a version before the
// hold needs, it gives way, and the hold moves on at once.
func TestAHoldLetsALocalLockHolderGiveWay(t *testing.T) {
	c := clustertest.Start(t, 2, clustertest.Options{})
	c.Exec(0, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 0), (2, 0)`)
	c.AwaitConverged(time.Minute)
	ctx := context.Background()

	holder := c.Connect(0)
	var h int64
	if err := holder.QueryRow(ctx, `SELECT tashkent.hold_commits(0, 20000)`).Scan(&h); err != nil {
		t.Fatal(err)
	}
	local := c.Connect(0)
	for _, sql := range []string{`BEGIN`, `SELECT * FROM t WHERE id = 1 FOR UPDATE`, `UPDATE t SET v = v + 1 WHERE id = 2`} {
		if _, err := local.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	c.Exec(1, `UPDATE t SET v = 100 WHERE id = 1`) // version h+1, which needs row 1
	commit := commitAsync(local, `COMMIT`)         // version h+2, held
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	var got int64
	if err := holder.QueryRow(ctx, `SELECT tashkent.hold_commits($1, 20000)`, h+1).Scan(&got); err != nil {
		t.Fatalf("moving the hold to version %d: %v", h+1, err)
	}
	if took := time.Since(start); got != h+1 || took > 5*time.Second {
		t.Fatalf("hold_commits(%d) = %d after %s, want it at once", h+1, got, took)
	}
	if _, err := holder.Exec(ctx, `SELECT tashkent.release_commits()`); err != nil {
		t.Fatal(err)
	}
	t.Logf("the held local commit: %v", <-commit)
	c.AwaitConverged(time.Minute)
	for i := range 2 {
		if rows := c.Rows(i, "t"); rows != c.Rows(0, "t") {
			t.Errorf("replica%d: %s, replica1: %s", i+1, rows, c.Rows(0, "t"))
		}
	}
}

// progressHook runs f once, at the first table verify reports.
type progressHook struct {
	once sync.Once
	f    func()
}

func (w *progressHook) Write(p []byte) (int, error) {
	w.once.Do(w.f)
	return len(p), nil
}

// A TRUNCATE committed after the common version is not MVCC-safe: verify
// locks the tables it compares before it lets commits go on, so the
// TRUNCATE waits for the comparison and the table is compared as it was.
func TestVerifyComparesATableTruncatedMeanwhileAsItWas(t *testing.T) {
	c := clustertest.Start(t, 2, clustertest.Options{})
	c.Exec(0, `CREATE TABLE a_first (id int PRIMARY KEY); INSERT INTO a_first SELECT generate_series(1, 10);
CREATE TABLE b_truncated (id int PRIMARY KEY); INSERT INTO b_truncated SELECT generate_series(1, 100);`)
	c.AwaitConverged(time.Minute)
	truncated := make(chan struct{})
	hook := &progressHook{f: func() {
		go func() {
			defer close(truncated)
			c.Exec(0, `TRUNCATE b_truncated`)
		}()
		time.Sleep(500 * time.Millisecond) // the TRUNCATE waits for verify's lock
	}}
	r, err := verify.Run(context.Background(), verify.Options{Replicas: replicas(c), Progress: hook})
	if err != nil {
		t.Fatal(err)
	}
	<-truncated
	for _, tr := range r.Tables {
		if tr.Name == "public.b_truncated" && (!tr.Equal() || tr.Rows[0] != 100) {
			t.Errorf("b_truncated at version %d: equal %v, rows %v; want equal, 100 rows", r.Version, tr.Equal(), tr.Rows)
		}
	}
	c.AwaitConverged(time.Minute)
}
