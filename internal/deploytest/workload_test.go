package deploytest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The workload. Each transaction inserts a row with an id no other
// transaction uses and adds one to one of a few shared counters (hot rows:
// transactions on different hosts conflict, and the certifier aborts one
// with 40001). Every outcome is recorded per id, so that the end can check
// on every replica: each acknowledged id is there, each refused id is not,
// and the counters add up to the rows (no transaction half applied).
//
// Each host has two clients, both as the application role over TLS with
// a password (pg_hba.conf's hostssl line): one on the host itself, dialing
// the host's address from inside its namespace, and one on the monitoring
// host, across the bridge and the host's firewall.

const (
	counterRows = 8
	appRole     = "app"
	appPassword = "app-secret"
	// transactionTimeout bounds one transaction; a commit past it is of
	// unknown outcome. Longer than a partition lasts, shorter than
	// tashkent.certify_timeout.
	transactionTimeout = 20 * time.Second
	// reconnectPause is the pause after a failed connection attempt.
	reconnectPause = 200 * time.Millisecond
)

const schemaSQL = `
CREATE TABLE deploy_rows (id bigint PRIMARY KEY, host int NOT NULL, counter int NOT NULL);
CREATE TABLE deploy_counters (id int PRIMARY KEY, n bigint NOT NULL);
CREATE ROLE ` + appRole + ` LOGIN PASSWORD '` + appPassword + `';
GRANT SELECT, INSERT, UPDATE ON deploy_rows, deploy_counters TO ` + appRole + `;
`

// outcome is what a client learned of its transaction.
type outcome int

const (
	acked   outcome = iota // COMMIT answered: committed
	refused                // rolled back for sure: an error before COMMIT, 40001 at COMMIT
	unknown                // COMMIT sent, no answer that settles it
)

// ledger records every transaction's outcome.
type ledger struct {
	mu      sync.Mutex
	outcome map[int64]outcome
	perHost map[int]map[outcome]int
	events  []event
	nextID  atomic.Int64
}

// event is when a host's client learned an outcome.
type event struct {
	host    int
	outcome outcome
	at      time.Time
}

func newLedger() *ledger {
	return &ledger{outcome: map[int64]outcome{}, perHost: map[int]map[outcome]int{}}
}

func (l *ledger) record(id int64, host int, o outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcome[id] = o
	if l.perHost[host] == nil {
		l.perHost[host] = map[outcome]int{}
	}
	l.perHost[host][o]++
	l.events = append(l.events, event{host: host, outcome: o, at: time.Now()})
}

// between counts the outcomes per host in [from, to).
func (l *ledger) between(o outcome, from, to time.Time) map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for _, e := range l.events {
		if e.outcome == o && !e.at.Before(from) && e.at.Before(to) {
			out[e.host]++
		}
	}
	return out
}

// acksBetween counts the acknowledged transactions per host in [from, to).
func (l *ledger) acksBetween(from, to time.Time) map[int]int { return l.between(acked, from, to) }

// summary says how many transactions each host's clients ran, by outcome.
func (l *ledger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, host := range slices.Sorted(maps.Keys(l.perHost)) {
		c := l.perHost[host]
		fmt.Fprintf(&b, "host%d: %d acknowledged, %d refused, %d unknown; ", host, c[acked], c[refused], c[unknown])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// client is one application session pinned to one host.
type client struct {
	name string
	host *host
	cfg  *pgx.ConnConfig
}

// clients are the workload's sessions: per host, one on the host and one
// on the monitoring host.
func (l *lab) clients() ([]*client, error) {
	var out []*client
	for _, h := range l.hosts {
		dsn := fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres sslmode=verify-full sslrootcert=%s connect_timeout=5",
			h.addr, pgPort, appRole, appPassword, filepath.Join(l.certs, "ca.crt"))
		local, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		local.DialFunc = h.ns.DialContext
		remote, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		out = append(out,
			&client{name: fmt.Sprintf("host%d-local", h.k), host: h, cfg: local},
			&client{name: fmt.Sprintf("host%d-remote", h.k), host: h, cfg: remote})
	}
	return out, nil
}

// workload is the clients, running.
type workload struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// startWorkload starts every client.
func (l *lab) startWorkload(ctx context.Context, lg *ledger) *workload {
	clients, err := l.clients()
	if err != nil {
		l.t.Fatal(err)
	}
	w := &workload{}
	ctx, w.cancel = context.WithCancel(ctx)
	for _, c := range clients {
		w.wg.Go(func() { c.run(ctx, lg) })
	}
	return w
}

// stop ends every client's loop and waits for them; a transaction under
// way is cut short, with its outcome recorded.
func (w *workload) stop() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
}

// run runs transactions until ctx ends.
func (c *client) run(ctx context.Context, lg *ledger) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, transactionTimeout)
			var err error
			conn, err = pgx.ConnectConfig(cctx, c.cfg)
			cancel()
			if err != nil {
				conn = nil
				sleep(ctx, reconnectPause)
				continue
			}
		}
		id := lg.nextID.Add(1)
		o, err := c.transact(ctx, conn, id)
		lg.record(id, c.host.k, o)
		if err != nil {
			// Whatever failed, a new session: the old one may be
			// broken, or in a failed transaction.
			conn.Close(context.Background())
			conn = nil
		}
	}
}

// transact runs one transaction and says what is known of its outcome.
func (c *client) transact(ctx context.Context, conn *pgx.Conn, id int64) (outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, transactionTimeout)
	defer cancel()
	counter := id%counterRows + 1
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"BEGIN", nil},
		{"INSERT INTO deploy_rows (id, host, counter) VALUES ($1, $2, $3)", []any{id, c.host.k, counter}},
		{"UPDATE deploy_counters SET n = n + 1 WHERE id = $1", []any{counter}},
	} {
		if _, err := conn.Exec(ctx, q.sql, q.args...); err != nil {
			return refused, err
		}
	}
	tag, err := conn.Exec(ctx, "COMMIT")
	switch {
	case err == nil && tag.String() == "COMMIT":
		return acked, nil
	case err == nil:
		return refused, fmt.Errorf("COMMIT answered %s", tag)
	case sqlState(err) == "40001":
		return refused, err
	default:
		return unknown, err
	}
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// replicaRows is what one replica holds of the workload.
type replicaRows struct {
	ids     map[int64]bool
	counter int64 // the counters' sum
}

func readRows(ctx context.Context, h *host) (*replicaRows, error) {
	conn, err := pgx.Connect(ctx, h.socketDSN())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	r := &replicaRows{ids: map[int64]bool{}}
	rows, err := conn.Query(ctx, "SELECT id FROM deploy_rows")
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		r.ids[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return r, conn.QueryRow(ctx, "SELECT sum(n) FROM deploy_counters").Scan(&r.counter)
}

// checkRows checks one replica against the ledger: every acknowledged id
// is there, no refused one is, and the counters add up to the rows.
func (lg *ledger) checkRows(name string, r *replicaRows) []error {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var lost, ghosts []int64
	for id, o := range lg.outcome {
		switch {
		case o == acked && !r.ids[id]:
			lost = append(lost, id)
		case o == refused && r.ids[id]:
			ghosts = append(ghosts, id)
		}
	}
	var errs []error
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("%s lacks %d acknowledged transaction(s): ids %v", name, len(lost), firstIDs(lost)))
	}
	if len(ghosts) > 0 {
		errs = append(errs, fmt.Errorf("%s holds %d transaction(s) whose clients were told they failed: ids %v", name, len(ghosts), firstIDs(ghosts)))
	}
	if r.counter != int64(len(r.ids)) {
		errs = append(errs, fmt.Errorf("%s: the counters add up to %d, but it holds %d rows: a transaction was half applied", name, r.counter, len(r.ids)))
	}
	for id := range r.ids {
		if _, ok := lg.outcome[id]; !ok {
			errs = append(errs, fmt.Errorf("%s holds id %d, which no client wrote", name, id))
			break
		}
	}
	return errs
}

func firstIDs(ids []int64) []int64 {
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids[:min(len(ids), 10)]
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// The end checks find each kind of wrong replica: an acknowledged
// transaction missing, a refused one present, one half applied.
func TestLedgerFindsLostRefusedAndHalfAppliedTransactions(t *testing.T) {
	lg := newLedger()
	lg.record(1, 1, acked)
	lg.record(2, 2, refused)
	lg.record(3, 3, unknown)
	for _, c := range []struct {
		name    string
		rows    replicaRows
		wantErr string
	}{
		{"all there", replicaRows{ids: map[int64]bool{1: true, 3: true}, counter: 2}, ""},
		{"unknown left out", replicaRows{ids: map[int64]bool{1: true}, counter: 1}, ""},
		{"lost", replicaRows{ids: map[int64]bool{3: true}, counter: 1}, "lacks 1 acknowledged"},
		{"refused present", replicaRows{ids: map[int64]bool{1: true, 2: true}, counter: 2}, "were told they failed"},
		{"half applied", replicaRows{ids: map[int64]bool{1: true}, counter: 2}, "half applied"},
		{"never written", replicaRows{ids: map[int64]bool{1: true, 9: true}, counter: 2}, "no client wrote"},
	} {
		errs := lg.checkRows(c.name, &c.rows)
		switch {
		case c.wantErr == "" && len(errs) > 0:
			t.Errorf("%s: %v", c.name, errs)
		case c.wantErr != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), c.wantErr)):
			t.Errorf("%s: got %v, want one error with %q", c.name, errs, c.wantErr)
		}
	}
}
