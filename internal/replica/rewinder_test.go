package replica

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// pinApplicationName tells the test's pin connections apart.
const pinApplicationName = "tashkent-test-pin"

// pinConnect opens pin connections to srv as the agent's are opened:
// idle transactions never time out.
func pinConnect(srv *pgserver.Server) func(ctx context.Context) (*pgx.Conn, error) {
	return pinConnectDialing(srv, nil)
}

// pinConnectDialing is pinConnect whose connections are dialled by dial
// (nil: pgx's own).
func pinConnectDialing(srv *pgserver.Server, dial pgconn.DialFunc) func(ctx context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(srv.DSN("postgres"))
		if err != nil {
			return nil, err
		}
		cfg.RuntimeParams["application_name"] = pinApplicationName
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
		if dial != nil {
			cfg.DialFunc = dial
		}
		return pgx.ConnectConfig(ctx, cfg)
	}
}

// pinSnapshots counts the pin connections that hold a snapshot back from
// vacuum.
func pinSnapshots(t *testing.T, admin *pgx.Conn) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(tctx(t), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND backend_xmin IS NOT NULL`, pinApplicationName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// pinConnections counts the open pin connections.
func pinConnections(t *testing.T, admin *pgx.Conn) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(tctx(t), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, pinApplicationName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A Rewinder pins the replica every Interval, keeps the newest usable pin
// and the candidates after it on at most ConnectionsMax connections (the
// newest candidate making room when all hold one), trims its undo window
// to the oldest pin, and rewinds to the newest usable pin at or below the
// common version: the replica then holds what a replica that applied only
// up to that pin holds.
func TestRewinderGoesBackToTheNewestUsablePin(t *testing.T) {
	c := newCluster(t, 2)
	b, r := c.nodes[0], c.nodes[1]
	ctx := tctx(t)
	c.commit(0, undoSchema)
	for _, sql := range durableTxns {
		c.commit(0, sql)
	}
	clock := &fakeClock{now: time.Unix(1000, 0)}
	rw := NewRewinder(RewinderConfig{
		Pins:    PinsConfig{Connect: pinConnect(b.srv), Now: clock.Now},
		Version: c.version(0),
		Applier: b.applier,
	})
	t.Cleanup(func() { rw.Pins.Close(context.Background()) })
	tick := func(advance time.Duration) {
		t.Helper()
		clock.Advance(advance)
		if err := rw.Pins.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if oldest, ok := rw.Pins.Oldest(); ok {
			rw.Window.Trim(oldest)
		}
	}
	commitAndDeliver := func(sqls ...string) {
		t.Helper()
		// B commits its own clients' transactions: their entries are
		// delivered to its agent like the others (already applied).
		for _, sql := range sqls {
			for _, e := range c.commit(0, sql) {
				rw.Delivered(logentry.Encode(e))
			}
		}
	}
	k0 := c.version(0)
	tick(0)
	commitAndDeliver(failedTxns[0], failedTxns[1])
	tick(50 * time.Millisecond) // not due
	if got := rw.Pins.Versions(); !slices.Equal(got, []uint64{k0}) {
		t.Fatalf("pins %v before the interval passed, want [%d]", got, k0)
	}
	tick(50 * time.Millisecond)
	commitAndDeliver(failedTxns[2], failedTxns[3])
	tick(100 * time.Millisecond)
	commitAndDeliver(failedTxns[4], failedTxns[5])
	tick(100 * time.Millisecond)
	if got, want := rw.Pins.Versions(), []uint64{k0, k0 + 2, k0 + 6}; !slices.Equal(got, want) {
		t.Fatalf("pins %v, want %v (the candidate at %d made room)", got, want, k0+4)
	}
	if n := pinConnections(t, b.connect(t)); n != PinConnectionsMaxDefault {
		t.Errorf("%d pin connections, want %d", n, PinConnectionsMaxDefault)
	}
	if u := rw.Pins.Usable(k0 + 6); u != nil {
		t.Fatalf("usable pin at %d with nothing durable", u.Version)
	}
	// At once, whatever the interval (after a barrier): the newest
	// candidate makes room.
	commitAndDeliver(failedTxns[6])
	if v, err := rw.Pins.TakeNow(ctx); err != nil || v != k0+7 {
		t.Fatalf("TakeNow: %d, %v; want a pin at %d", v, err, k0+7)
	}
	if got, want := rw.Pins.Versions(), []uint64{k0, k0 + 2, k0 + 7}; !slices.Equal(got, want) {
		t.Fatalf("pins %v after TakeNow, want %v", got, want)
	}

	rw.Advance(k0 + 3) // durable: the pin at k0 + 2 is usable
	tick(0)
	if got, want := rw.Pins.Versions(), []uint64{k0 + 2, k0 + 7}; !slices.Equal(got, want) {
		t.Fatalf("pins %v after durable %d, want %v", got, k0+3, want)
	}
	if n := pinSnapshots(t, b.connect(t)); n != 2 {
		t.Errorf("%d pin connections hold a snapshot (backend_xmin), want 2: the dropped pin's ended", n)
	}
	if start, _ := rw.Window.Span(); start != k0+2 {
		t.Errorf("the undo window starts at %d, want %d (the oldest pin)", start, k0+2)
	}
	commitAndDeliver(failedTxns[7:]...)
	v := c.version(0)
	c.log = c.log[:k0+2]
	c.catchUp(1)

	k, err := rw.Rewind(ctx, b.apply, k0+3, v)
	if err != nil || k != k0+2 {
		t.Fatalf("Rewind to the common version %d: %d, %v; want the pin at %d", k0+3, k, err, k0+2)
	}
	sameChecksums(t, checksum(t, r.connect(t)), checksum(t, b.apply))
	if got := c.version(0); got != k {
		t.Errorf("version %d after the rewind, want %d", got, k)
	}
	if got := rw.Pins.Versions(); !slices.Equal(got, []uint64{k}) {
		t.Errorf("pins %v after the rewind, want [%d] (those above saw failed versions)", got, k)
	}
	if s, l := rw.Window.Span(); s != k || l != k {
		t.Errorf("undo window (%d, %d] after the rewind, want empty at %d", s, l, k)
	}

	if _, resumed, err := rw.ResumeRewind(ctx, b.apply); err != nil || resumed {
		t.Errorf("ResumeRewind after a finished rewind: %v, %v; want nothing to resume", resumed, err)
	}

	empty := NewRewinder(RewinderConfig{Pins: PinsConfig{Connect: pinConnect(b.srv)}, Version: k})
	var cu *CannotUndoError
	if _, err := empty.Rewind(ctx, b.apply, k, k+1); !errors.As(err, &cu) {
		t.Errorf("Rewind without a pin: %v, want a CannotUndoError", err)
	}
}

// pgbenchSchema is pgbench's tables (pgbench_history has no primary key).
const pgbenchSchema = `
CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88));
CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int, tbalance int, filler char(84));
CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84));
CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
`

// pgbenchLoad fills the tables as pgbench -i at scale 1 does.
const pgbenchLoad = `
INSERT INTO pgbench_branches SELECT 1, 0, '';
INSERT INTO pgbench_tellers SELECT i, 1, 0, '' FROM generate_series(1, 10) AS i;
INSERT INTO pgbench_accounts SELECT i, 1, 0, '' FROM generate_series(1, 100000) AS i;
ANALYZE;
`

// What a rewind of 1,000 failed versions costs, logged (run with -v):
//
//	go test -count=1 -v -run TestRewindTimeOfAThousandFailedVersions ./internal/replica/
//
// On pgbench's tables at scale 1, as the replica's agent would do it:
// undo (read the rows of every key written through the pin, delete, insert,
// one transaction with synchronous_commit on) and finish. Two loads: 1,000
// single-row versions (an update of a random pgbench_accounts row each),
// and 1,000 TPC-B transactions (three updates and an insert into
// pgbench_history, which has no primary key).
func TestRewindTimeOfAThousandFailedVersions(t *testing.T) {
	for _, load := range []struct {
		name string
		txn  func(rng *rand.Rand) string
	}{
		{"single-row versions", func(rng *rand.Rand) string {
			return fmt.Sprintf(`UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = %d`, rng.IntN(10000)-5000, 1+rng.IntN(100000))
		}},
		{"TPC-B transactions", func(rng *rand.Rand) string {
			aid, tid, delta := 1+rng.IntN(100000), 1+rng.IntN(10), rng.IntN(10000)-5000
			return fmt.Sprintf(`UPDATE pgbench_accounts SET abalance = abalance + %[3]d WHERE aid = %[1]d;
				UPDATE pgbench_tellers SET tbalance = tbalance + %[3]d WHERE tid = %[2]d;
				UPDATE pgbench_branches SET bbalance = bbalance + %[3]d WHERE bid = 1;
				INSERT INTO pgbench_history VALUES (%[2]d, 1, %[1]d, %[3]d, now(), '')`, aid, tid, delta)
		}},
	} {
		t.Run(load.name, func(t *testing.T) {
			f := &undoFixture{c: newCluster(t, 3)}
			f.a, f.b, f.r = f.c.nodes[0], f.c.nodes[1], f.c.nodes[2]
			f.c.commit(0, pgbenchSchema)
			for i := range f.c.nodes {
				f.c.catchUp(i)
				f.c.local(i, pgbenchLoad)
			}
			f.k = uint64(len(f.c.log))
			pin, err := TakePin(tctx(t), f.b.connect(t), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 1000 {
				f.c.commit(0, load.txn(rng))
			}
			f.v = uint64(len(f.c.log))
			applying := time.Now()
			for from := int(f.k); from < int(f.v); from += 100 { // the agent's batches
				if err := f.b.applier.Apply(tctx(t), f.b.apply, f.c.log[from:min(from+100, int(f.v))]); err != nil {
					t.Fatal(err)
				}
			}
			applied := time.Since(applying)
			ctx := tctx(t)
			start := time.Now()
			if err := f.b.applier.Undo(ctx, f.b.apply, pin, f.c.log[f.k:f.v]); err != nil {
				t.Fatal(err)
			}
			undone := time.Now()
			if _, err := FinishRewind(ctx, f.b.apply, f.k); err != nil {
				t.Fatal(err)
			}
			finished := time.Now()
			t.Logf("rewind of %d failed %s: undo %v, finish %v, total %v (applying them took %v)",
				f.v-f.k, load.name, undone.Sub(start).Round(time.Millisecond), finished.Sub(undone).Round(time.Millisecond),
				finished.Sub(start).Round(time.Millisecond), applied.Round(time.Millisecond))
			sameChecksums(t, checksum(t, f.r.connect(t)), checksum(t, f.b.apply))
			if v, _ := ReadVersion(ctx, f.b.apply); v != f.k {
				t.Errorf("version %d after the rewind, want %d", v, f.k)
			}
		})
	}
}

// Run pins the replica every Interval, moves the usable pin on as the
// durable version does, trims the undo window to the oldest pin, and
// closes every pin connection when its context ends.
func TestRewinderRunPinsUntilItsContextEnds(t *testing.T) {
	c := newCluster(t, 1)
	nd := c.nodes[0]
	c.commit(0, undoSchema)
	rw := NewRewinder(RewinderConfig{Pins: PinsConfig{Connect: pinConnect(nd.srv), Interval: 20 * time.Millisecond}, Version: c.version(0)})
	ctx, cancel := context.WithCancel(tctx(t))
	done := make(chan struct{})
	go func() {
		rw.Run(ctx)
		close(done)
	}()
	for _, sql := range durableTxns {
		for _, e := range c.commit(0, sql) {
			rw.Delivered(logentry.Encode(e))
		}
	}
	v := c.version(0)
	rw.Advance(v)
	admin := nd.connect(t)
	deadline := time.Now().Add(time.Minute)
	for {
		oldest, ok := rw.Pins.Oldest()
		start, _ := rw.Window.Span()
		if ok && oldest == v && start == v && pinSnapshots(t, admin) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pins %v, undo window from %d, %d snapshots held; want one pin at %d and the window trimmed to it",
				rw.Pins.Versions(), start, pinSnapshots(t, admin), v)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	for n := pinConnections(t, admin); n > 0; n = pinConnections(t, admin) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pin connections open after Run ended", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeHook runs a function once, at the next write to any connection
// dialled through it.
type writeHook struct {
	mu   sync.Mutex
	next func()
}

func (h *writeHook) arm(f func()) {
	h.mu.Lock()
	h.next = f
	h.mu.Unlock()
}

func (h *writeHook) fire() {
	h.mu.Lock()
	f := h.next
	h.next = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
}

type hookedConn struct {
	net.Conn
	hook *writeHook
}

func (c *hookedConn) Write(b []byte) (int, error) {
	c.hook.fire()
	return c.Conn.Write(b)
}

// hookedPinConnect is pinConnect whose connections fire hook.
func hookedPinConnect(srv *pgserver.Server, hook *writeHook) func(ctx context.Context) (*pgx.Conn, error) {
	return pinConnectDialing(srv, func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &hookedConn{Conn: c, hook: hook}, nil
	})
}

// Pins against a live server: a pin taken across a rewind is discarded,
// even when the rewind ran while Tick released the pin that made room
// (before it took the new one); a pin whose backend was ended is dropped
// at the next Tick; Close leaves a leased pin to its reader until Return;
// and a rewind whose apply connection broke during the undo keeps the pins
// suspended until ResumeRewind.
func TestPinsAcrossRewindsBrokenConnectionsAndClose(t *testing.T) {
	c := newCluster(t, 1)
	nd := c.nodes[0]
	ctx := tctx(t)
	c.commit(0, undoSchema)
	hook := &writeHook{}
	clock := &fakeClock{now: time.Unix(1000, 0)}
	rw := NewRewinder(RewinderConfig{
		Pins:    PinsConfig{Connect: hookedPinConnect(nd.srv, hook), Now: clock.Now, ConnectionsMax: 2},
		Version: c.version(0),
	})
	t.Cleanup(func() { rw.Pins.Close(context.Background()) })
	admin := nd.connect(t)
	tick := func() {
		t.Helper()
		clock.Advance(PinIntervalDefault)
		if err := rw.Pins.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	commitAndDeliver := func(sql string) {
		t.Helper()
		for _, e := range c.commit(0, sql) {
			rw.Delivered(logentry.Encode(e))
		}
	}

	v1 := c.version(0)
	tick()
	commitAndDeliver(durableTxns[0])
	tick()
	commitAndDeliver(durableTxns[1])
	// Both connections hold a candidate: the next Tick releases the newer
	// to make room, and a whole rewind happens as it does.
	hook.arm(func() { rw.Pins.suspend(); rw.Pins.resume() })
	tick()
	if got := rw.Pins.Versions(); !slices.Equal(got, []uint64{v1}) {
		t.Fatalf("pins %v; want [%d]: the pin taken across a rewind is discarded", got, v1)
	}

	tick()
	v3 := c.version(0)
	if got := rw.Pins.Versions(); !slices.Equal(got, []uint64{v1, v3}) {
		t.Fatalf("pins %v, want [%d %d]", got, v1, v3)
	}
	mustExec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '`+pinApplicationName+`'`)
	awaitPinConnections(t, admin, 0)
	if err := rw.Pins.Tick(ctx); err != nil { // not due: no candidate
		t.Fatal(err)
	}
	if got := rw.Pins.Versions(); len(got) != 0 {
		t.Fatalf("pins %v after their backends were ended, want none", got)
	}

	tick()
	rw.Advance(v3)
	pin := rw.Pins.Usable(v3)
	if pin == nil || pin.Version != v3 {
		t.Fatalf("usable pin %v, want one at %d", pin, v3)
	}
	rw.Pins.Close(ctx)
	if _, err := pin.readRows(ctx, []pinQuery{{what: "a row", sql: `SELECT 'read'`}}); err != nil {
		t.Fatalf("read through a leased pin after Close: %v", err)
	}
	rw.Pins.Return(pin)
	if !pin.conn.IsClosed() {
		t.Error("the leased pin's connection is open after Return, want it closed")
	}
	awaitPinConnections(t, admin, 0)
}

// awaitPinConnections waits until n pin connections are open.
func awaitPinConnections(t *testing.T, admin *pgx.Conn, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for got := pinConnections(t, admin); got != n; got = pinConnections(t, admin) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pin connections open, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A rewind whose apply connection broke during the undo may have
// committed it: the pins stay suspended (none is taken while the rows and
// the replica's version may disagree) until ResumeRewind finds no marker.
func TestPinsStaySuspendedWhenTheUndoConnectionBroke(t *testing.T) {
	c := newCluster(t, 1)
	nd := c.nodes[0]
	ctx := tctx(t)
	c.commit(0, undoSchema)
	k := c.version(0)
	rw := NewRewinder(RewinderConfig{Pins: PinsConfig{Connect: pinConnect(nd.srv)}, Version: k})
	t.Cleanup(func() { rw.Pins.Close(context.Background()) })
	if _, err := rw.Pins.TakeNow(ctx); err != nil {
		t.Fatal(err)
	}
	rw.Advance(k)
	for _, e := range c.commit(0, durableTxns[0]) {
		rw.Delivered(logentry.Encode(e))
	}
	broken := nd.applierConn(t)
	if err := broken.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var cu *CannotUndoError
	if _, err := rw.Rewind(ctx, broken, k, c.version(0)); err == nil || errors.As(err, &cu) {
		t.Fatalf("Rewind on a closed apply connection: %v, want an error of the connection", err)
	}
	if _, err := rw.Pins.TakeNow(ctx); !errors.Is(err, errPinsStopped) {
		t.Fatalf("TakeNow after the undo's connection broke: %v, want %v", err, errPinsStopped)
	}
	if _, resumed, err := rw.ResumeRewind(ctx, nd.apply); err != nil || resumed {
		t.Fatalf("ResumeRewind: %v, %v; want no rewind pending", resumed, err)
	}
	if _, err := rw.Pins.TakeNow(ctx); err != nil {
		t.Fatalf("TakeNow after ResumeRewind: %v", err)
	}
}
