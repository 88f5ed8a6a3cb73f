package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// The list-append workload (Elle, Kingsbury & Alvaro, VLDB 2020): each
// transaction appends unique elements to lists and reads lists, so every
// read reveals the order of all appends before it and adya can rebuild the
// version order of every key. Lists live in a table with a primary key
// (tashkent refuses tables without one), as a comma-separated text value.

const (
	// laActiveKeys is how many keys transactions pick from at a time: few
	// keys, much contention, many chances for an anomaly to show.
	laActiveKeys = 6
	// laWritesPerKeyMax retires a key after this many appends, so that
	// lists (read in full by every read) stay short.
	laWritesPerKeyMax = 40
	// laMopsMax bounds the micro-operations of one transaction.
	laMopsMax = 4
)

// listAppend generates list-append transactions over a rotating pool of
// keys and records them in a History. Safe for concurrent use.
type listAppend struct {
	table string

	mu      sync.Mutex
	active  []int
	writes  map[int]int
	nextKey int

	nextValue atomic.Int64
	hist      *History

	ackMu sync.Mutex
	acked map[int][]int // key -> elements whose append was acknowledged

	// ed records, in mode ed, each transaction's outcome to check after
	// the run (nil in mw).
	ed *edLedger
}

func newListAppend(table string) *listAppend {
	w := &listAppend{table: table, writes: map[int]int{}, hist: NewHistory(), acked: map[int][]int{}}
	for range laActiveKeys {
		w.active = append(w.active, w.freshKeyLocked())
	}
	return w
}

func (w *listAppend) freshKeyLocked() int {
	w.nextKey++
	return w.nextKey - 1
}

func (w *listAppend) createSQL() string {
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (k int PRIMARY KEY, v text NOT NULL)", w.table)
}

// generate draws the micro-operations of one transaction.
func (w *listAppend) generate(c *client) []Mop {
	n := 1 + c.rng.IntN(laMopsMax)
	mops := make([]Mop, 0, n)
	w.mu.Lock()
	defer w.mu.Unlock()
	for range n {
		i := c.rng.IntN(len(w.active))
		k := w.active[i]
		if c.rng.IntN(2) == 0 {
			mops = append(mops, Mop{Kind: Read, Key: k, Nil: true})
			continue
		}
		mops = append(mops, Mop{Kind: Append, Key: k, Value: int(w.nextValue.Add(1))})
		if w.writes[k]++; w.writes[k] >= laWritesPerKeyMax {
			w.active[i] = w.freshKeyLocked()
		}
	}
	return mops
}

// step runs one transaction on c and records its invocation and completion.
func (w *listAppend) step(ctx context.Context, c *client, disconnect bool) OpType {
	mops := w.generate(c)
	fast := w.ed.drawFast(c)
	w.hist.Add(Invoke, c.proc, mops, "")
	proc := c.proc
	done := make([]Mop, len(mops))
	copy(done, mops)
	t, err := c.txn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		if w.ed != nil {
			if _, err := conn.Exec(ctx, setDurability(fast)); err != nil {
				return err
			}
		}
		for i := range done {
			if err := w.runMop(ctx, conn, &done[i]); err != nil {
				return err
			}
			if disconnect && i == 0 {
				c.drop()
				return errDisconnect
			}
		}
		return nil
	})
	switch {
	case t == OK && w.ed != nil:
		return w.committedED(ctx, c, proc, mops, done, fast)
	case t == OK:
		w.hist.Add(OK, proc, done, "")
		w.ack(done)
	case t == Fail:
		i := w.hist.Add(Fail, proc, mops, errText(err))
		if w.ed != nil {
			w.ed.failedAtCommit(i, mops, err)
		}
	default:
		w.hist.Add(Info, proc, mops, errText(err))
	}
	return t
}

// setDurability makes a transaction of mode ed fast or safe. The session
// runs fast by default (synchronous_commit = off), so that the query of
// last_commit() after a COMMIT is a fast read: a safe one right after a
// rewind may be refused with 40001 (it names a version number, not an
// epoch; docs/GUARANTEES.md).
func setDurability(fast bool) string {
	if fast {
		return "SET LOCAL synchronous_commit = off"
	}
	return "SET LOCAL synchronous_commit = on"
}

// committedED records a transaction of mode ed whose COMMIT was
// acknowledged: a writing one with its last_commit(), so that its outcome
// can be asked after the run (ed.go). A safe writing one is durable, and
// its appends acknowledged, at once; a fast one whose last_commit() went
// unanswered may still fail, so its outcome is unknown.
func (w *listAppend) committedED(ctx context.Context, c *client, proc int, mops, done []Mop, fast bool) OpType {
	writes := slices.ContainsFunc(done, func(m Mop) bool { return m.Kind == Append })
	kind := edKindOf(fast, writes)
	var ref txnRef
	if writes {
		var err error
		if ref, err = lastCommit(ctx, c); err != nil && fast {
			w.hist.Add(Info, proc, mops, "fast COMMIT acknowledged; last_commit() unanswered: "+err.Error())
			w.ed.addUnresolved()
			return Info
		}
	}
	i := w.hist.Add(OK, proc, done, "")
	if !fast {
		w.ack(done)
	}
	if ref.Version != 0 || !writes {
		w.ed.add(edTxn{kind: kind, op: i, ref: ref, mops: done})
	}
	return OK
}

func (w *listAppend) runMop(ctx context.Context, conn *pgx.Conn, m *Mop) error {
	if m.Kind == Append {
		_, err := conn.Exec(ctx, fmt.Sprintf(
			"INSERT INTO %[1]s (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = %[1]s.v || ',' || excluded.v", w.table),
			m.Key, strconv.Itoa(m.Value))
		return err
	}
	var v *string
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT v FROM %s WHERE k = $1", w.table), m.Key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		m.Nil, m.Values = true, nil
		return nil
	}
	if err != nil {
		return err
	}
	vals, err := parseList(*v)
	if err != nil {
		return fmt.Errorf("key %d: %w", m.Key, err)
	}
	m.Nil, m.Values = false, vals
	return nil
}

func (w *listAppend) ack(mops []Mop) {
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	for _, m := range mops {
		if m.Kind == Append {
			w.acked[m.Key] = append(w.acked[m.Key], m.Value)
		}
	}
}

// lost compares the acknowledged appends with the lists a replica holds at
// the end and describes every acknowledged element that is missing.
func (w *listAppend) lost(final map[int][]int) []string {
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	var out []string
	for k, vals := range w.acked {
		have := map[int]bool{}
		for _, v := range final[k] {
			have[v] = true
		}
		for _, v := range vals {
			if !have[v] {
				out = append(out, fmt.Sprintf("%s key %d: acknowledged append of %d missing", w.table, k, v))
			}
		}
	}
	return out
}

func (w *listAppend) ackedCount() int {
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	n := 0
	for _, v := range w.acked {
		n += len(v)
	}
	return n
}

// readAll reads every list of the table (on a replica's PostgreSQL).
func (w *listAppend) readAll(ctx context.Context, conn *pgx.Conn) (map[int][]int, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT k, v FROM %s", w.table))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int][]int{}
	for rows.Next() {
		var k int
		var v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		if out[k], err = parseList(v); err != nil {
			return nil, fmt.Errorf("key %d: %w", k, err)
		}
	}
	return out, rows.Err()
}

func parseList(s string) ([]int, error) {
	if s == "" {
		return []int{}, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", s, err)
		}
		out[i] = v
	}
	return out, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
