package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// CannotUndoError says why the versions above a rewind's target cannot be
// undone: a version that wrote a whole table or the schema (TRUNCATE,
// DDL) or is part of a span, entries the undo window no longer holds, or
// no usable pin. The replica then needs a rebuild (state transfer).
type CannotUndoError struct {
	// Version is the first version that cannot be undone; 0: none in
	// particular.
	Version uint64
	Reason  string
}

func (e *CannotUndoError) Error() string {
	if e.Version == 0 {
		return "replica: cannot undo: " + e.Reason
	}
	return fmt.Sprintf("replica: cannot undo version %d: %s", e.Version, e.Reason)
}

// undoPlan is what undoing a run of versions writes, per table: for a
// table with a primary key, every key the versions wrote (its row is
// read back as it was before them, through a pin); for one without, the
// inverse of their changes.
type undoPlan struct {
	tables []*undoTable // by first appearance
	byName map[string]*undoTable
}

type undoTable struct {
	table string
	keys  []string // JSON arrays as capture printed them, by first appearance
	seen  map[string]bool
	// keyless: the inverse changes of a table without a primary key,
	// collapsed as the applier collapses a step's (keylessRows): deleted
	// are rows the versions inserted, inserts those they deleted.
	keyless *keylessRows
}

// buildUndoPlan plans undoing entries (consecutive versions). A version
// that cannot be undone row by row (TRUNCATE, DDL, a span, a change this
// code does not know) is a CannotUndoError.
func buildUndoPlan(entries []*certifierpb.LogEntry) (*undoPlan, error) {
	p := &undoPlan{byName: map[string]*undoTable{}}
	for _, e := range entries {
		if e.GetSpanFirst() != 0 || e.GetSpanLast() != 0 {
			return nil, &CannotUndoError{Version: e.GetVersion(), Reason: fmt.Sprintf("it is part of the streamed transaction of versions %d..%d", e.GetSpanFirst(), e.GetSpanLast())}
		}
		if err := p.addKeys(e); err != nil {
			return nil, err
		}
	}
	// A table without a primary key is a multiset: its inverse changes go
	// in reverse order, newest version first, each one's last change
	// first.
	for i := len(entries) - 1; i >= 0; i-- {
		changes := entries[i].GetWriteset().GetChanges()
		for j := len(changes) - 1; j >= 0; j-- {
			p.addInverse(changes[j])
		}
	}
	return p, nil
}

// addKeys adds the keys e wrote, and refuses what cannot be undone.
func (p *undoPlan) addKeys(e *certifierpb.LogEntry) error {
	for i, c := range e.GetWriteset().GetChanges() {
		switch c.GetOp() {
		case certifierpb.Op_OP_UPSERT, certifierpb.Op_OP_DELETE:
			if c.GetTable() == "" || len(c.GetKey()) == 0 {
				return fmt.Errorf("replica: undo: version %d change %d: row change without table or key", e.GetVersion(), i)
			}
			p.table(c.GetTable()).addKey(string(c.GetKey()))
		case certifierpb.Op_OP_INSERT_ROW, certifierpb.Op_OP_DELETE_ROW:
			if c.GetTable() == "" || len(keylessRow(c)) == 0 {
				return fmt.Errorf("replica: undo: version %d change %d: %v without table or row", e.GetVersion(), i, c.GetOp())
			}
		case certifierpb.Op_OP_UNIQUE_KEY, certifierpb.Op_OP_REFERENCE:
			// Certified, never applied: nothing to undo.
		case certifierpb.Op_OP_TRUNCATE:
			return &CannotUndoError{Version: e.GetVersion(), Reason: "it truncates table " + c.GetTable()}
		case certifierpb.Op_OP_DDL:
			return &CannotUndoError{Version: e.GetVersion(), Reason: fmt.Sprintf("it runs DDL (%s)", abbrev(string(c.GetRow()), 100))}
		default:
			return &CannotUndoError{Version: e.GetVersion(), Reason: fmt.Sprintf("its change %d is %v, which is not a row change", i, c.GetOp())}
		}
	}
	return nil
}

// addInverse adds the inverse of c if it is a change of a table without
// a primary key.
func (p *undoPlan) addInverse(c *certifierpb.Change) {
	switch c.GetOp() {
	case certifierpb.Op_OP_INSERT_ROW:
		p.keylessTable(c.GetTable()).delete(string(c.GetRow()))
	case certifierpb.Op_OP_DELETE_ROW:
		p.keylessTable(c.GetTable()).insert(string(c.GetKey()))
	}
}

// keylessRow is the row of a change of a table without a primary key: the
// new row of an insert, the old row (its key) of a delete.
func keylessRow(c *certifierpb.Change) []byte {
	if c.GetOp() == certifierpb.Op_OP_DELETE_ROW {
		return c.GetKey()
	}
	return c.GetRow()
}

func (p *undoPlan) table(name string) *undoTable {
	t := p.byName[name]
	if t == nil {
		t = &undoTable{table: name, seen: map[string]bool{}}
		p.byName[name] = t
		p.tables = append(p.tables, t)
	}
	return t
}

func (p *undoPlan) keylessTable(name string) *keylessRows {
	t := p.table(name)
	if t.keyless == nil {
		t.keyless = &keylessRows{pending: map[string][]int{}}
	}
	return t.keyless
}

func (t *undoTable) addKey(key string) {
	if !t.seen[key] {
		t.seen[key] = true
		t.keys = append(t.keys, key)
	}
}

func (p *undoPlan) tableNames() []string {
	names := make([]string, len(p.tables))
	for i, t := range p.tables {
		names[i] = t.table
	}
	return names
}

// keyArray is the table's keys as one JSON array, as keyMatch reads $1.
func (t *undoTable) keyArray() string {
	return "[" + strings.Join(t.keys, ",") + "]"
}

// Statements of the undo transaction (Undo). The rewind's own are the
// extension's (extension/src/rewind.c); synchronous_commit is on for the
// transaction, so that once it committed its marker (tashkent.rewind)
// survives a crash and the rewind can be finished after the restart.
const (
	rewindBeginSQL    = `SELECT tashkent.rewind_begin($1, $2)`
	syncCommitOnSQL   = `SELECT pg_catalog.set_config('synchronous_commit', 'on', true)`
	deleteHistorySQL  = `DELETE FROM tashkent.history WHERE first_version OPERATOR(pg_catalog.>) $1`
	rewindFinishSQL   = `SELECT tashkent.rewind_finish($1)`
	pendingRewindSQL  = `SELECT target_version FROM tashkent.rewind`
	undoRowTextPrefix = `SELECT (tashkent_r.*)::pg_catalog.text FROM ONLY `
)

// beforeImageSQL reads, through a pin, the rows of table m whose keys are
// in $1 (a JSON array), as their record text.
func beforeImageSQL(m *tableMeta) string {
	return undoRowTextPrefix + m.qname + " AS tashkent_r WHERE " + m.match
}

// undoDeleteSQL deletes the rows of table m (itself, not its inheritors:
// each table's rows are captured under its own name) whose keys are in $1.
func undoDeleteSQL(m *tableMeta) string {
	return "DELETE FROM ONLY " + m.qname + " WHERE " + m.match
}

// Undo takes the replica's database back from its version v to pin's
// version k, where entries are the versions (k, v], in order, as they
// were applied or committed here. It runs in one transaction on apply,
// the agent's registered apply connection (idle): every key a version
// wrote in a table with a primary key is deleted and its row as it was at
// k, read through pin, inserted again (deleting first, no unique value
// is taken twice on the way); in a table without one, the rows the
// versions inserted are deleted and those they deleted inserted again,
// the inverse of their changes in reverse order (the applier applied
// them as a multiset: keylessRows; reading such a table through the pin
// would mean reading the whole table twice, as it has no key to look up).
// Foreign-key checks and ordinary triggers are off, as in the applier.
// The transaction starts with tashkent.rewind_begin(k, v), which refuses
// (55006) while another backend is in the commit order, closes the turn,
// and inserts the marker (tashkent.rewind); it deletes the history runs
// above k and commits with synchronous_commit on. From rewind_begin on,
// sessions count the replica's version as k (committed_version, waits);
// what holds it (the replication origin's progress) is still v until
// FinishRewind sets it to k.
//
// A version that cannot be undone row by row is a CannotUndoError, before
// anything is written.
func (a *Applier) Undo(ctx context.Context, apply *pgx.Conn, pin *Pin, entries []*certifierpb.LogEntry) error {
	first, last, err := checkEntries(entries)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("replica: undo: no versions to undo above the pin at version %d", pin.Version)
	}
	k, v := pin.Version, last
	if first != k+1 {
		return fmt.Errorf("replica: undo: the entries start at version %d, the pin is at version %d", first, k)
	}
	plan, err := buildUndoPlan(entries)
	if err != nil {
		return err
	}
	if err := idle(ctx, apply); err != nil {
		return err
	}
	tg := target{sendBatch: apply.SendBatch, query: apply.Query, pg: apply.PgConn()}
	a.Invalidate() // no DDL runs in (k, v], but the cache may predate one at or below k
	if err := a.loadMeta(ctx, tg, plan.tableNames()); err != nil {
		return fmt.Errorf("replica: undo versions %d..%d: %w", first, last, err)
	}
	before, err := a.readBeforeImages(ctx, pin, plan)
	if err != nil && pin.conn.IsClosed() {
		return &CannotUndoError{Version: first, Reason: fmt.Sprintf("the pinned snapshot at version %d is gone (%v)", k, err)}
	}
	if err != nil {
		return fmt.Errorf("replica: undo versions %d..%d: %w", first, last, err)
	}
	b, err := a.undoBatch(plan, before, k, v)
	if err != nil {
		return fmt.Errorf("replica: undo versions %d..%d: %w", first, last, err)
	}
	if err := apply.SendBatch(ctx, b).Close(); err != nil {
		if rerr := rollback(ctx, apply); rerr != nil {
			return fmt.Errorf("replica: undo versions %d..%d: %w (and rollback: %v)", first, last, err, rerr)
		}
		return fmt.Errorf("replica: undo versions %d..%d: %w", first, last, err)
	}
	return nil
}

// readBeforeImages reads, through the pin, the rows of the keys the plan
// deletes, per table with a primary key (nil for the others).
func (a *Applier) readBeforeImages(ctx context.Context, pin *Pin, plan *undoPlan) ([][]string, error) {
	var queries []pinQuery
	var at []int
	for i, t := range plan.tables {
		if len(t.keys) == 0 {
			continue
		}
		m, err := a.meta(t.table)
		if err != nil {
			return nil, err
		}
		if m.keyless {
			return nil, fmt.Errorf("table %s has no primary key on this replica, but a version changed its rows by primary key", m.qname)
		}
		queries = append(queries, pinQuery{what: "read the rows of " + m.qname, sql: beforeImageSQL(m), args: []any{t.keyArray()}})
		at = append(at, i)
	}
	rows, err := pin.readRows(ctx, queries)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(plan.tables))
	for j, i := range at {
		out[i] = rows[j]
	}
	return out, nil
}

// undoBatch is the undo transaction: every delete before any insert.
func (a *Applier) undoBatch(plan *undoPlan, before [][]string, k, v uint64) (*pgx.Batch, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(rewindBeginSQL, int64(k), int64(v))
	b.Queue(setApplySettings)
	b.Queue(syncCommitOnSQL)
	if len(plan.tables) > 0 {
		a.mu.Lock()
		gen := a.gen
		a.mu.Unlock()
		b.Queue(checkGenSQL, gen)
	}
	var inserts []func()
	for i, t := range plan.tables {
		m, err := a.meta(t.table)
		if err != nil {
			return nil, err
		}
		if len(t.keys) > 0 {
			queueChecked(b, undoDeleteSQL(m), "delete from", m.qname, t.keyArray())
			if rows := before[i]; len(rows) > 0 {
				inserts = append(inserts, func() { queueChecked(b, m.insert, "insert into", m.qname, rows) })
			}
		}
		if t.keyless != nil {
			if !m.keyless {
				return nil, fmt.Errorf("table %s has a primary key on this replica, but a version changed its rows as a table without one", m.qname)
			}
			if len(t.keyless.deleted) > 0 {
				b.Queue(pinRowTextSQL)
				queueChecked(b, m.keylessDelete, "delete from", m.qname, t.keyless.deleted)
				b.Queue(unpinRowTextSQL)
			}
			if rows := t.keyless.inserts(); len(rows) > 0 {
				inserts = append(inserts, func() { queueChecked(b, m.insert, "insert into", m.qname, rows) })
			}
		}
	}
	for _, insert := range inserts {
		insert()
	}
	b.Queue(deleteHistorySQL, int64(k))
	b.Queue("COMMIT")
	return b, nil
}

// FinishRewind completes a rewind whose undo committed (Undo): the
// replica's version becomes k (tashkent.rewind_finish: the replication
// origin's progress, the shared state, the marker deleted). It returns
// the version the replica went back from. conn is any superuser's idle
// connection. Calling it again after a crash is safe.
func FinishRewind(ctx context.Context, conn *pgx.Conn, k uint64) (from uint64, err error) {
	var v int64
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(syncCommitOnSQL)
	b.Queue(rewindFinishSQL, int64(k)).QueryRow(func(row pgx.Row) error { return row.Scan(&v) })
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		_ = rollback(ctx, conn)
		return 0, fmt.Errorf("replica: finish the rewind to version %d: %w", k, err)
	}
	return uint64(v), nil
}

// ResumeRewind finishes a rewind whose undo committed but whose finish
// did not (the marker tashkent.rewind, left by a crash between the two):
// the agent calls it at start, before it reads the replica's version,
// applies anything or admits clients. It reports the version the replica
// went back to, and false if no rewind was pending (or the extension
// predates rewinds). conn is any superuser's idle connection.
func ResumeRewind(ctx context.Context, conn *pgx.Conn) (k uint64, resumed bool, err error) {
	k, pending, err := PendingRewind(ctx, conn)
	if err != nil || !pending {
		return 0, false, err
	}
	if _, err := FinishRewind(ctx, conn, k); err != nil {
		return 0, false, err
	}
	return k, true, nil
}

// PendingRewind reports the target of the rewind whose undo committed and
// whose finish did not, if there is one (the marker, tashkent.rewind).
func PendingRewind(ctx context.Context, conn *pgx.Conn) (k uint64, pending bool, err error) {
	var target int64
	err = conn.QueryRow(ctx, pendingRewindSQL).Scan(&target)
	switch {
	case errors.Is(err, pgx.ErrNoRows), pgcode.MissingObject(err):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("replica: read the pending rewind: %w", err)
	}
	return uint64(target), true, nil
}
