package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// Applier applies remote writesets to one replica database. It caches each
// table's metadata (primary key, columns) and the statements built from
// it; the cache is dropped whenever a DDL entry is applied, when the DDL
// generation (tashkent.ddl_log) moved since it was filled, and after an
// apply fails on what looks like a schema change.
//
// An Applier is safe for concurrent use, but one database connection must
// not be used by two calls at once (pgx connections are not).
type Applier struct {
	mu     sync.Mutex
	tables map[string]*tableMeta
	gen    int64 // max(tashkent.ddl_log.gen) when the cached metadata was read
	// Logger hears of DDL run as the applier because the role that ran it
	// at the origin lacks a privilege here (runDDL); nil: nobody does.
	Logger *slog.Logger
	// copyRowsMin: a step's inserts of at least so many rows of a table
	// go by COPY (copyrows.go); 0: none do.
	copyRowsMin int
	// Copies counts what COPY did; NewApplier sets a fresh one.
	Copies *CopyCounts
}

// NewApplier returns an Applier with an empty cache.
func NewApplier() *Applier {
	return &Applier{tables: map[string]*tableMeta{}, copyRowsMin: copyRowsMin, Copies: &CopyCounts{}}
}

// Invalidate drops the cached table metadata. Apply notices DDL that
// changed a table by itself (the extension's event trigger logs every DDL
// command on a permanent object in tashkent.ddl_log, in every session);
// Invalidate is for anything else.
func (a *Applier) Invalidate() {
	a.mu.Lock()
	clear(a.tables)
	a.mu.Unlock()
}

// Apply applies entries with a fresh Applier (no metadata cache across
// calls: one more round trip per call). See Applier.Apply.
func Apply(ctx context.Context, conn *pgx.Conn, entries []*certifierpb.LogEntry) error {
	return NewApplier().Apply(ctx, conn, entries)
}

// PrepareApplySession sets session_replication_role = replica for the
// whole session of conn, a connection that does nothing but Apply (the
// agent's applier). Apply sets the role in each of its transactions
// anyway; what this saves is the plan cache. PostgreSQL drops every cached
// plan of a session whenever its session_replication_role changes value
// (which triggers fire changes what a plan does), so a role set and
// reverted at every apply transaction has each of Apply's prepared
// statements analyzed and planned again at every batch
// (TestApplyKeepsItsPlansOnAPreparedSession). With the session's role
// already replica, Apply's setting changes nothing and the plans stay
// cached. Nothing else should run on conn afterwards: foreign-key checks
// and ordinary user triggers do not fire in it.
func PrepareApplySession(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		return fmt.Errorf("replica: prepare the apply session: %w", err)
	}
	return nil
}

// Apply applies the writesets of entries, in order, in one database
// transaction that commits their versions (in several when the entries
// run DDL: a transaction ends after each entry that does, see
// throughFirstDDL). The entries must have consecutive versions. conn must be idle (not in a transaction),
// a superuser's, and the agent's registered applier
// (tashkent.register_applier): the transaction's first statement is
// tashkent.apply_versions(first, last), and its COMMIT waits in the
// extension until version first - 1 is committed (the replica's commit
// order), then records last as the replica's version. It runs with
// session_replication_role = replica, so that neither foreign-key checks
// nor ordinary user triggers fire (the origin ran them; what they wrote
// is in the writeset). The capture triggers are enabled ALWAYS and fire,
// but capture nothing in the registered applier (extension/src/capture.c).
//
// Rows are applied by primary key, batched: the changes of all entries are
// collapsed to the last change per (table, key), and each table gets one
// DELETE and one INSERT ... ON CONFLICT DO UPDATE for all its rows.
// TRUNCATE and DDL entries are barriers: the changes before them are
// applied first. OP_UNIQUE_KEY changes are for certification only and are
// skipped. The parent rows of OP_REFERENCE changes are locked FOR KEY
// SHARE, as the origin's foreign-key checks locked them (which do not run
// here, under session_replication_role = replica): a local transaction
// that deletes such a parent then blocks the apply, and is doomed or
// refused by certification, instead of committing after the child
// arrived (a replica starts a local transaction's certification from its
// own version, extension/src/commit.c, which relies on every version
// that concerns a row waiting for that row's lock). Without DDL the whole
// transaction is one round trip (two the first time a table is seen).
//
// A table's inserts in a step of copyRowsMin (1,000) rows or more (a
// large transaction's, above all a span's) go by COPY instead, in a round
// trip of its own, where COPY does what the statement does (copyrows.go):
// the rows that may not exist here (tableRows.mayExist) are copied as
// plain inserts after the others are upserted. If the attempt then fails
// on an integrity constraint (a unique violation: a row exists that the
// upsert would have updated) or on a row text the converter does not
// read, the transaction is made again with the statements alone, and a
// table whose COPY failed so keeps to the statements until its metadata
// is loaded again.
//
// Rows of a table without a primary key (OP_INSERT_ROW, OP_DELETE_ROW)
// are applied in the order of their changes, as a multiset (keylessRows):
// per table and step, one DELETE of exactly as many rows of each text as
// the step deletes (read from the whole table), then one INSERT. A row
// to delete that is not there fails the apply: the replica has diverged
// (TK005, after one retry of the transaction: see its case below).
//
// If the upsert hits a unique violation (a secondary unique index whose
// values the batch moves between rows), the transaction is retried once
// deleting every affected key before inserting the new rows. If it fails in
// a way that suggests a stale metadata cache, it is retried once with
// fresh metadata. Apply leaves conn idle, also after an error. A version
// of the range already committed fails with IsAlreadyCommitted's error.
//
// Entries of a span (a streamed transaction) are applied by ApplySpan,
// never here.
func (a *Applier) Apply(ctx context.Context, conn *pgx.Conn, entries []*certifierpb.LogEntry) error {
	if _, _, err := checkEntries(entries); err != nil || len(entries) == 0 {
		return err
	}
	for _, e := range entries {
		if e.GetSpanFirst() != 0 {
			return fmt.Errorf("replica: apply: version %d is part of span %d..%d, which ApplySpan applies", e.GetVersion(), e.GetSpanFirst(), e.GetSpanLast())
		}
	}
	for len(entries) > 0 {
		n := throughFirstDDL(entries)
		if err := a.applyTransaction(ctx, conn, entries[:n]); err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// throughFirstDDL is the number of entries up to and including the first
// that runs DDL (all of them if none does). A run's transaction ends after
// DDL: what some DDL makes cannot be used in the transaction that made it
// (a value ALTER TYPE ... ADD VALUE adds to an enum: 55P04), as it could
// not have been at the origin, where the DDL committed first.
func throughFirstDDL(entries []*certifierpb.LogEntry) int {
	for i, e := range entries {
		for _, c := range e.GetWriteset().GetChanges() {
			if c.GetOp() == certifierpb.Op_OP_DDL {
				return i + 1
			}
		}
	}
	return len(entries)
}

// applyTransaction applies entries in one transaction (see Apply).
func (a *Applier) applyTransaction(ctx context.Context, conn *pgx.Conn, entries []*certifierpb.LogEntry) error {
	first, last, err := checkEntries(entries)
	if err != nil {
		return err
	}
	if err := idle(ctx, conn); err != nil {
		return err
	}
	p, err := buildPlan(entries)
	if err != nil {
		return err
	}
	tg := target{sendBatch: conn.SendBatch, query: conn.Query, pg: conn.PgConn()}
	var r retries
	for {
		at := a.attempt(tg, &r)
		err := a.run(ctx, at, p, first, last)
		if err == nil {
			at.succeeded()
			return nil
		}
		if rerr := rollback(ctx, conn); rerr != nil {
			return fmt.Errorf("replica: apply versions %d..%d: %w (and rollback: %v)", first, last, err, rerr)
		}
		code := pgcode.Of(err)
		if code == pgcode.AlreadyCommitted {
			return fmt.Errorf("replica: apply versions %d..%d: a version of the range is committed already: %w", first, last, err)
		}
		if ctx.Err() == nil && r.again(at, err) {
			if isSchemaError(code) {
				a.Invalidate()
			}
			continue
		}
		return fmt.Errorf("replica: apply versions %d..%d: %w", first, last, err)
	}
}

// checkEntries checks that entries carry consecutive versions and returns
// the first and last.
func checkEntries(entries []*certifierpb.LogEntry) (first, last uint64, err error) {
	if len(entries) == 0 {
		return 0, 0, nil
	}
	for i, e := range entries {
		if e == nil {
			return 0, 0, fmt.Errorf("replica: apply: entry %d is nil", i)
		}
		v := e.GetVersion()
		if v == 0 || v > maxVersion {
			return 0, 0, fmt.Errorf("replica: apply: entry %d has invalid version %d", i, v)
		}
		if i > 0 && v != entries[i-1].GetVersion()+1 {
			return 0, 0, fmt.Errorf("replica: apply: versions not consecutive: %d follows %d", v, entries[i-1].GetVersion())
		}
	}
	return entries[0].GetVersion(), entries[len(entries)-1].GetVersion(), nil
}

// idle makes sure conn is not in a transaction before a new apply
// transaction. The ROLLBACK after a failed attempt can itself fail, when
// a cancel meant for the attempt (the agent cancels a batch that waits
// behind an abandoned version until it ends) arrives while it runs, and
// leave the connection in the failed transaction: that transaction is
// rolled back now, not taken for a reason to stop applying.
func idle(ctx context.Context, conn *pgx.Conn) error {
	for range 3 {
		if conn.PgConn().TxStatus() == 'I' {
			return nil
		}
		if err := rollback(ctx, conn); err != nil && ctx.Err() != nil {
			return err
		}
	}
	return fmt.Errorf("replica: apply: connection is in a transaction (status %q) that ROLLBACK does not end", conn.PgConn().TxStatus())
}

func rollback(ctx context.Context, conn *pgx.Conn) error {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	return err
}

// IsAlreadyCommitted reports Apply's error for a range of versions that
// starts at or below the replica's version.
func IsAlreadyCommitted(err error) bool { return pgcode.Of(err) == pgcode.AlreadyCommitted }

// isSchemaError reports SQLSTATEs that a statement built from stale table
// metadata produces.
func isSchemaError(code string) bool {
	switch code {
	case pgcode.UndefinedTable,
		pgcode.UndefinedColumn,
		pgcode.InvalidColumnReference, // ON CONFLICT target no longer unique
		pgcode.DatatypeMismatch,
		pgcode.UndefinedFunction,    // an operator for a changed type
		pgcode.FeatureNotSupported,  // cached plan must not change result type
		pgcode.DDLGenerationChanged: // a DDL committed since the cache was filled
		return true
	}
	return false
}

// metaError says a table's metadata is missing from the cache.
type metaError struct {
	table string
	msg   string
}

func (e *metaError) Error() string { return fmt.Sprintf("table %s %s", e.table, e.msg) }

// ---- plan ----

type stepKind uint8

const (
	stepRows stepKind = iota
	stepTruncate
	stepDDL
)

// tableRows is one table's collapsed row changes within a step.
type tableRows struct {
	table string
	order []string // keys, by first appearance
	last  map[string]*certifierpb.Change
	// deletedFirst holds the keys an upsert of the step follows a delete
	// of (a row deleted and inserted again, as a table refresh does):
	// their rows may exist here, whether or not marked keeps_row. nil if
	// none.
	deletedFirst map[string]bool
	// keyless holds the step's changes of the table's rows if it has no
	// primary key (OP_INSERT_ROW, OP_DELETE_ROW); nil if none.
	keyless *keylessRows
}

// keylessRows is what a step does to a table without a primary key. Its
// rows have no identity: equal rows cannot be told apart, so the table is
// a multiset of row texts, and a run of inserts and deletes, in order,
// amounts to deleting some rows that were there and inserting others. A
// delete of a row that an earlier change of the step inserted (the same
// text) takes that insert back; any other delete must find the row among
// those that were there. Applied as one DELETE of those (exactly as many
// rows of each text: keylessDeleteSQL) and then one INSERT of the inserts
// left, the step leaves the rows that applying each change in order
// would.
type keylessRows struct {
	inserted []string         // rows inserted, in order
	taken    []bool           // per inserted row: taken back by a later delete
	pending  map[string][]int // row text -> its inserts not taken back, in order
	deleted  []string         // rows to delete among those already there
}

func (k *keylessRows) insert(row string) {
	k.pending[row] = append(k.pending[row], len(k.inserted))
	k.inserted = append(k.inserted, row)
	k.taken = append(k.taken, false)
}

func (k *keylessRows) delete(row string) {
	if p := k.pending[row]; len(p) > 0 {
		k.taken[p[len(p)-1]] = true
		k.pending[row] = p[:len(p)-1]
		return
	}
	k.deleted = append(k.deleted, row)
}

// inserts returns the inserted rows not taken back, in order.
func (k *keylessRows) inserts() []string {
	var out []string
	for i, row := range k.inserted {
		if !k.taken[i] {
			out = append(out, row)
		}
	}
	return out
}

type step struct {
	kind     stepKind
	tables   []*tableRows // stepRows, by first appearance
	byName   map[string]*tableRows
	refs     []*tableRows // stepRows: parent rows referenced, by the name they are certified under
	refsBy   map[string]*tableRows
	truncate []string // stepTruncate
	ddl      string   // stepDDL
	// searchPath is the search_path the DDL ran under at the origin
	// (the change's key), "" for the database's default.
	searchPath string
	role       string // the role that ran the DDL at the origin, "" if not known
}

// buildPlan turns entries into steps: runs of row changes collapsed per
// (table, key), runs of TRUNCATEs (one statement, so that tables that
// reference each other can be truncated together, as the origin did), and
// DDL statements, in order.
func buildPlan(entries []*certifierpb.LogEntry) ([]*step, error) {
	var plan []*step
	cur := func(kind stepKind) *step {
		if n := len(plan); n > 0 && plan[n-1].kind == kind && kind != stepDDL {
			return plan[n-1]
		}
		s := &step{kind: kind}
		if kind == stepRows {
			s.byName, s.refsBy = map[string]*tableRows{}, map[string]*tableRows{}
		}
		plan = append(plan, s)
		return s
	}
	rows := func(table string) *tableRows {
		s := cur(stepRows)
		tr := s.byName[table]
		if tr == nil {
			tr = &tableRows{table: table, last: map[string]*certifierpb.Change{}}
			s.byName[table] = tr
			s.tables = append(s.tables, tr)
		}
		return tr
	}
	for _, e := range entries {
		for i, c := range e.GetWriteset().GetChanges() {
			if c == nil {
				return nil, fmt.Errorf("replica: apply: version %d change %d is nil", e.GetVersion(), i)
			}
			switch c.GetOp() {
			case certifierpb.Op_OP_UPSERT, certifierpb.Op_OP_DELETE:
				if c.GetTable() == "" || len(c.GetKey()) == 0 {
					return nil, fmt.Errorf("replica: apply: version %d change %d: row change without table or key", e.GetVersion(), i)
				}
				if c.GetOp() == certifierpb.Op_OP_UPSERT && len(c.GetRow()) == 0 {
					return nil, fmt.Errorf("replica: apply: version %d change %d: upsert of %s without a row", e.GetVersion(), i, c.GetTable())
				}
				tr := rows(c.GetTable())
				tr.add(c)
			case certifierpb.Op_OP_INSERT_ROW, certifierpb.Op_OP_DELETE_ROW:
				row := c.GetRow()
				if c.GetOp() == certifierpb.Op_OP_DELETE_ROW {
					row = c.GetKey()
				}
				if c.GetTable() == "" || len(row) == 0 {
					return nil, fmt.Errorf("replica: apply: version %d change %d: %v without table or row", e.GetVersion(), i, c.GetOp())
				}
				tr := rows(c.GetTable())
				if tr.keyless == nil {
					tr.keyless = &keylessRows{pending: map[string][]int{}}
				}
				if c.GetOp() == certifierpb.Op_OP_INSERT_ROW {
					tr.keyless.insert(string(row))
				} else {
					tr.keyless.delete(string(row))
				}
			case certifierpb.Op_OP_TRUNCATE:
				if c.GetTable() == "" {
					return nil, fmt.Errorf("replica: apply: version %d change %d: truncate without table", e.GetVersion(), i)
				}
				s := cur(stepTruncate)
				dup := false
				for _, t := range s.truncate {
					dup = dup || t == c.GetTable()
				}
				if !dup {
					s.truncate = append(s.truncate, c.GetTable())
				}
			case certifierpb.Op_OP_UNIQUE_KEY:
				// Certified, never applied: the row changes that took or
				// freed the value carry the data.
			case certifierpb.Op_OP_REFERENCE:
				if c.GetTable() == "" || len(c.GetKey()) == 0 {
					return nil, fmt.Errorf("replica: apply: version %d change %d: reference without table or key", e.GetVersion(), i)
				}
				s := cur(stepRows)
				tr := s.refsBy[c.GetTable()]
				if tr == nil {
					tr = &tableRows{table: c.GetTable(), last: map[string]*certifierpb.Change{}}
					s.refsBy[c.GetTable()] = tr
					s.refs = append(s.refs, tr)
				}
				if _, ok := tr.last[string(c.GetKey())]; !ok {
					tr.order = append(tr.order, string(c.GetKey()))
					tr.last[string(c.GetKey())] = c
				}
			case certifierpb.Op_OP_DDL:
				if len(c.GetRow()) == 0 {
					return nil, fmt.Errorf("replica: apply: version %d change %d: DDL without SQL text", e.GetVersion(), i)
				}
				st := cur(stepDDL)
				st.ddl, st.searchPath, st.role = string(c.GetRow()), string(c.GetKey()), c.GetRole()
			default:
				return nil, fmt.Errorf("replica: apply: version %d change %d: unknown op %v", e.GetVersion(), i, c.GetOp())
			}
		}
	}
	return plan, nil
}

// tablesUntilDDL lists the tables the steps from i up to the next DDL
// touch.
func tablesUntilDDL(plan []*step, i int) []string {
	var names []string
	for ; i < len(plan) && plan[i].kind != stepDDL; i++ {
		for _, tr := range plan[i].tables {
			names = append(names, tr.table)
		}
		for _, tr := range plan[i].refs {
			names = append(names, tr.table)
		}
		names = append(names, plan[i].truncate...)
	}
	return names
}

// ---- execution ----

type target struct {
	sendBatch func(context.Context, *pgx.Batch) pgx.BatchResults
	query     func(context.Context, string, ...any) (pgx.Rows, error)
	pg        *pgconn.PgConn
}

// Settings for the apply transaction: foreign-key checks and ordinary
// triggers silent, and values parsed as capture printed them (capture
// pins the print settings: extension/src/capture.c).
//
// Every statement the applier sends names its functions and operators
// with their schema (pg_catalog.set_config, OPERATOR(pg_catalog.=)): it
// runs with the search_path the database and role give the session, which
// an operator can set to list a schema before pg_catalog, and a function,
// aggregate or operator there with a builtin's name and argument types
// would be found first (TestApplyUnderAHostileSearchPath). Qualified names
// resolve to the same objects the bare ones did, so the statements, their
// results and their plans are unchanged.
const (
	setApplySettings = `SELECT pg_catalog.set_config('session_replication_role', 'replica', true), ` +
		`pg_catalog.set_config('IntervalStyle', 'postgres', true), pg_catalog.set_config('DateStyle', 'ISO, YMD', true)`
	// applyVersionsSQL is the first statement of an apply transaction:
	// the transaction commits versions $1..$2 (extension/src/apply.c).
	applyVersionsSQL = `SELECT tashkent.apply_versions($1, $2)`
	checkGenSQL      = `SELECT tashkent.check_ddl_generation($1)`
	// check_function_bodies is off while replicated DDL runs, as in a
	// pg_dump restore: the origin checked the body, and one that names a
	// session's temporary table would fail here for good.
	// The saved values go under the prefix tashkent_apply: the extension
	// reserves tashkent.* for its own settings.
	ddlPrologue = `SELECT pg_catalog.set_config('tashkent_apply.saved_search_path', pg_catalog.current_setting('search_path'), true),
	pg_catalog.set_config('tashkent_apply.saved_check_function_bodies', pg_catalog.current_setting('check_function_bodies'), true);
SET LOCAL search_path TO DEFAULT;
SET LOCAL check_function_bodies TO off;
`
	ddlEpilogue = `
;RESET ROLE;
SELECT pg_catalog.set_config('search_path', pg_catalog.current_setting('tashkent_apply.saved_search_path'), true),
	pg_catalog.set_config('check_function_bodies', pg_catalog.current_setting('tashkent_apply.saved_check_function_bodies'), true)`
)

func (a *Applier) run(ctx context.Context, at *attempt, plan []*step, first, last uint64) error {
	queueBegin(at.b, first, last)
	if err := a.queuePlan(ctx, at, plan, first); err != nil {
		return err
	}
	at.b.Queue("COMMIT")
	return at.flush(ctx)
}

// queueBegin queues the start of the transaction that commits versions
// first..last.
func queueBegin(b *pgx.Batch, first, last uint64) {
	b.Queue("BEGIN")
	b.Queue(applyVersionsSQL, int64(first), int64(last))
	b.Queue(setApplySettings)
}

// queuePlan queues plan's statements on at, after loading the table
// metadata they need. A DDL step sends what is queued and runs the DDL;
// first names the versions in its messages.
func (a *Applier) queuePlan(ctx context.Context, at *attempt, plan []*step, first uint64) error {
	if err := a.loadMeta(ctx, at.tg, tablesUntilDDL(plan, 0)); err != nil {
		return err
	}
	if len(tablesUntilDDL(plan, 0)) > 0 {
		a.mu.Lock()
		gen := a.gen
		a.mu.Unlock()
		at.b.Queue(checkGenSQL, gen)
	}
	for i, st := range plan {
		switch st.kind {
		case stepRows:
			if err := a.queueRows(ctx, at, st); err != nil {
				return err
			}
		case stepTruncate:
			names := make([]string, len(st.truncate))
			for j, t := range st.truncate {
				m, err := a.meta(t)
				if err != nil {
					return err
				}
				names[j] = m.qname
			}
			queueChecked(at.b, "TRUNCATE "+strings.Join(names, ", "), "truncate", strings.Join(names, ", "))
		case stepDDL:
			if err := at.flush(ctx); err != nil {
				return err
			}
			// A DDL statement may hold several statements, so it goes
			// through the simple query protocol, under the search_path it
			// ran under at the origin.
			if err := a.runDDL(ctx, at.tg, st, first); err != nil {
				return fmt.Errorf("DDL %q: %w", abbrev(st.ddl, 200), err)
			}
			a.Invalidate()
			if err := a.loadMeta(ctx, at.tg, tablesUntilDDL(plan, i+1)); err != nil {
				return err
			}
		}
	}
	return nil
}

// queueRows queues a step of row changes, and the locks on the parent
// rows they reference.
func (a *Applier) queueRows(ctx context.Context, at *attempt, st *step) error {
	for _, tr := range st.tables {
		m, err := a.meta(tr.table)
		if err != nil {
			return err
		}
		if err := at.queueTable(ctx, m, tr); err != nil {
			return err
		}
	}
	for _, tr := range st.refs {
		m, err := a.meta(tr.table)
		if err != nil {
			return err
		}
		queueChecked(at.b, m.lockShared, "lock the rows referenced in", tr.table, keyArray(tr.changes()))
	}
	return nil
}

// runDDL runs a DDL step as the role that ran it at the origin (roleFor).
// Some privileges are not replicated (a database's ownership, a grant made
// in maintenance on one replica), so the role may lack one here that it
// had there: the step is then run again as the applier, as a replica that
// cannot apply a version halts for good; what it creates then belongs to
// the applier's role on this replica, which the log says.
func (a *Applier) runDDL(ctx context.Context, tg target, st *step, first uint64) error {
	body := ddlPrologue + searchPathFor(st.searchPath)
	if st.role == "" {
		_, err := tg.pg.Exec(ctx, body+st.ddl+ddlEpilogue).ReadAll()
		return err
	}
	_, err := tg.pg.Exec(ctx, "SAVEPOINT tashkent_ddl_role;\n"+body+roleFor(st.role)+st.ddl+ddlEpilogue+
		";\nRELEASE SAVEPOINT tashkent_ddl_role").ReadAll()
	if pgcode.Of(err) != pgcode.InsufficientPrivilege {
		return err
	}
	if _, rerr := tg.pg.Exec(ctx, "ROLLBACK TO SAVEPOINT tashkent_ddl_role; RELEASE SAVEPOINT tashkent_ddl_role; RESET ROLE").ReadAll(); rerr != nil {
		return errors.Join(err, rerr)
	}
	if a.Logger != nil {
		a.Logger.Warn("a DDL statement failed here as the role that ran it; run as the applier instead, so what it creates belongs to the applier's role on this replica",
			"role", st.role, "from_version", first, "ddl", abbrev(st.ddl, 200), "err", err)
	}
	_, err = tg.pg.Exec(ctx, body+st.ddl+ddlEpilogue).ReadAll()
	return err
}

// roleFor makes a DDL step run as the role that ran it at the origin, so
// that what it creates has the same owner on every replica (and its
// default privileges apply); ddlEpilogue resets it. A role this replica
// does not have (created in maintenance elsewhere), or none given (an
// older origin): the applier's own, as the step would fail otherwise.
func roleFor(role string) string {
	if role == "" {
		return ""
	}
	return "SELECT pg_catalog.set_config('role', r.rolname, true) FROM pg_catalog.pg_roles r WHERE r.rolname = " +
		quoteLiteral(role) + ";\n"
}

// searchPathFor sets the search_path a DDL step ran under at the origin;
// none given (an older origin), the database's default stays.
func searchPathFor(path string) string {
	if path == "" {
		return ""
	}
	return "SELECT pg_catalog.set_config('search_path', " + quoteLiteral(path) + ", true);\n"
}

// queueChecked queues sql and wraps its error with what it was doing.
func queueChecked(b *pgx.Batch, sql, what, table string, args ...any) {
	qq := b.Queue(sql, args...)
	qq.Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s %s: %w", what, table, err)
		}
		return nil
	}
}

func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ---- table metadata ----

type tableMeta struct {
	qname string // schema-qualified, quoted, as the catalog names it
	// deferrablePK: ON CONFLICT cannot use a deferrable primary key as its
	// arbiter, so such tables are always applied by delete-then-insert.
	deferrablePK bool
	upsert       string // INSERT ... ON CONFLICT (pk) DO UPDATE
	insert       string // plain INSERT (delete-then-insert mode)
	delete       string // DELETE by key
	// lockShared takes FOR KEY SHARE on the rows of the keys given: the
	// parent rows a version's rows reference (see Applier.Apply).
	lockShared string
	// match is the condition on the rows whose key is one of $1 (a JSON
	// array of keys: keyMatch); empty for a table without a primary key.
	match string
	// keyless: the table has no primary key; upsert, delete and
	// lockShared are empty, keylessDelete deletes rows by their text.
	keyless       bool
	keylessDelete string
	// copy inserts rows as plain INSERT does, with COPY (copyRows); ""
	// where it would not do what the statements do (copyableSQL).
	copy string
	// fields has one element per field of the table's record text (a
	// column not dropped), true where the column takes a value (is not
	// generated): the fields COPY's lines carry.
	fields []bool
	// copyRefused: a COPY into the table failed on an integrity
	// constraint (a row it took for new exists here): its rows go by the
	// statements until the metadata is loaded again.
	copyRefused atomic.Bool
}

func (a *Applier) meta(table string) (*tableMeta, error) {
	a.mu.Lock()
	m := a.tables[table]
	a.mu.Unlock()
	if m == nil {
		return nil, &metaError{table, "has no loaded metadata"}
	}
	return m, nil
}

// loadMeta loads the metadata of the tables not in the cache, in one
// query (usually). When the DDL generation has moved since the cache was
// filled, the rest of the cache is dropped and reloaded too.
func (a *Applier) loadMeta(ctx context.Context, tg target, tables []string) error {
	for range 3 {
		missing := a.missing(tables)
		if len(missing) == 0 {
			return nil
		}
		loaded, gen, err := queryMeta(ctx, tg, missing)
		if err != nil {
			return err
		}
		a.mu.Lock()
		if gen != a.gen {
			clear(a.tables)
			a.gen = gen
		}
		for k, v := range loaded {
			a.tables[k] = v
		}
		a.mu.Unlock()
	}
	if missing := a.missing(tables); len(missing) > 0 {
		return fmt.Errorf("table definitions keep changing; could not load %s", strings.Join(missing, ", "))
	}
	return nil
}

func (a *Applier) missing(tables []string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var missing []string
	seen := map[string]bool{}
	for _, t := range tables {
		if a.tables[t] == nil && !seen[t] {
			seen[t] = true
			missing = append(missing, t)
		}
	}
	return missing
}

func queryMeta(ctx context.Context, tg target, names []string) (map[string]*tableMeta, int64, error) {
	var tables, labels, labelTables, labelIndexes []string
	for _, n := range names {
		if table, index, ok := indexLabel(n); ok {
			labels, labelTables, labelIndexes = append(labels, n), append(labelTables, table), append(labelIndexes, index)
		} else {
			tables = append(tables, n)
		}
	}
	loaded, gen, err := queryTableMeta(ctx, tg, tables)
	if err != nil || len(labels) == 0 {
		return loaded, gen, err
	}
	return loaded, gen, queryIndexMeta(ctx, tg, labels, labelTables, labelIndexes, loaded)
}

// indexLabel splits a name certified as "<table>#<index>" (a parent
// referenced through a unique index other than its primary key; the
// index named as %I quotes it) at the '#' outside double quotes.
func indexLabel(name string) (table, index string, ok bool) {
	quoted := false
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '"':
			quoted = !quoted
		case '#':
			if !quoted {
				return name[:i], name[i+1:], true
			}
		}
	}
	return "", "", false
}

// queryIndexMeta loads, for each "<table>#<index>" label, the statement
// that locks the table's rows by the index's key columns.
func queryIndexMeta(ctx context.Context, tg target, labels, tables, indexes []string, into map[string]*tableMeta) error {
	rows, err := tg.query(ctx, indexMetaSQL, labels, tables, indexes)
	if err != nil {
		return fmt.Errorf("load index metadata: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var label, qname string
		var cols, types []string
		if err := rows.Scan(&label, &qname, &cols, &types); err != nil {
			return fmt.Errorf("load index metadata: %w", err)
		}
		if qname == "" || len(cols) == 0 {
			return fmt.Errorf("unique index %s does not exist on this replica", label)
		}
		into[label] = &tableMeta{qname: qname, lockShared: lockSharedSQL(qname, keyMatch(cols, types))}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load index metadata: %w", err)
	}
	return nil
}

func queryTableMeta(ctx context.Context, tg target, names []string) (map[string]*tableMeta, int64, error) {
	rows, err := tg.query(ctx, tableMetaSQL, names)
	if err != nil {
		return nil, 0, fmt.Errorf("load table metadata: %w", err)
	}
	defer rows.Close()
	loaded := map[string]*tableMeta{}
	var gen int64
	for rows.Next() {
		var name, qname string
		var exists, deferrable, copyable bool
		var pk, pkTypes, cols []string
		var fields []bool
		if err := rows.Scan(&name, &exists, &qname, &deferrable, &gen, &pk, &pkTypes, &cols, &fields, &copyable); err != nil {
			return nil, 0, fmt.Errorf("load table metadata: %w", err)
		}
		if !exists {
			return nil, 0, fmt.Errorf("table %s does not exist on this replica", name)
		}
		m := buildMeta(qname, deferrable, pk, pkTypes, cols)
		if copyable && len(cols) > 0 {
			m.copy, m.fields = copySQL(qname, cols), fields
		}
		loaded[name] = m
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("load table metadata: %w", err)
	}
	return loaded, gen, nil
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// buildMeta builds a table's statements. qname is the name the catalog
// gives the table (format('%I.%I', schema, table)): the table name in a
// Change, which comes over the network, is never pasted into SQL.
func buildMeta(qname string, deferrablePK bool, pk, pkTypes, cols []string) *tableMeta {
	qcols := make([]string, len(cols))
	rcols := make([]string, len(cols))
	isPK := map[string]bool{}
	for _, c := range pk {
		isPK[c] = true
	}
	var sets []string
	for i, c := range cols {
		qcols[i] = quoteIdent(c)
		rcols[i] = "r." + qcols[i]
		if !isPK[c] {
			sets = append(sets, qcols[i]+" = EXCLUDED."+qcols[i])
		}
	}
	qpk := make([]string, len(pk))
	for i, c := range pk {
		qpk[i] = quoteIdent(c)
	}
	// $1 is a text[] of rows in their text form; casting it to the table's
	// array type runs record_in on each, and unnest expands the columns.
	// Functions and operators are qualified (see setApplySettings).
	insert := fmt.Sprintf("INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM pg_catalog.unnest($1::pg_catalog.text[]::%s[]) AS r",
		qname, strings.Join(qcols, ", "), strings.Join(rcols, ", "), qname)
	if len(pk) == 0 {
		return &tableMeta{qname: qname, insert: insert, keyless: true, keylessDelete: keylessDeleteSQL(qname)}
	}
	conflict := " ON CONFLICT (" + strings.Join(qpk, ", ") + ") DO NOTHING"
	if len(sets) > 0 {
		conflict = " ON CONFLICT (" + strings.Join(qpk, ", ") + ") DO UPDATE SET " + strings.Join(sets, ", ")
	}
	match := keyMatch(pk, pkTypes)
	return &tableMeta{qname: qname, deferrablePK: deferrablePK, upsert: insert + conflict, insert: insert,
		delete: "DELETE FROM " + qname + " WHERE " + match, lockShared: lockSharedSQL(qname, match), match: match}
}

// copySQL loads the rows of table qname from their COPY lines, in which
// the columns cols (quoted by the catalog) take the values.
func copySQL(qname string, cols []string) string {
	qcols := make([]string, len(cols))
	for i, c := range cols {
		qcols[i] = quoteIdent(c)
	}
	return "COPY " + qname + " (" + strings.Join(qcols, ", ") + ") FROM STDIN"
}

// lockSharedSQL locks the rows that match FOR KEY SHARE.
func lockSharedSQL(qname, match string) string {
	return "SELECT FROM " + qname + " WHERE " + match + " FOR KEY SHARE"
}

// keyMatch is a condition on the rows whose columns cols (of types types)
// equal one of the keys in $1, a JSON array of keys, each a JSON array of
// the values in the order of cols, as capture prints keys. "(key) IN
// (subquery)" is "(key) = ANY (subquery)" with an unqualified =: the same
// sublink, with the operator named.
func keyMatch(cols, types []string) string {
	qc := make([]string, len(cols))
	kc := make([]string, len(cols))
	build := make([]string, len(cols))
	defs := make([]string, len(cols))
	for i, c := range cols {
		qc[i] = quoteIdent(c)
		kc[i] = "k." + qc[i]
		build[i] = fmt.Sprintf("%s, e.k OPERATOR(pg_catalog.->) %d", quoteLiteral(c), i)
		defs[i] = qc[i] + " " + types[i]
	}
	return fmt.Sprintf("(%s) OPERATOR(pg_catalog.=) ANY (SELECT %s FROM pg_catalog.json_array_elements($1::pg_catalog.json) AS e(k) "+
		"CROSS JOIN LATERAL pg_catalog.json_to_record(pg_catalog.json_build_object(%s)) AS k(%s))",
		strings.Join(qc, ", "), strings.Join(kc, ", "), strings.Join(build, ", "), strings.Join(defs, ", "))
}

// keylessDeleteSQL deletes, from the table without a primary key qname,
// as many rows whose text form equals each element of $1 (a text[]) as
// the element occurs there, and returns one element for which it found
// too few rows to tashkent.keyless_row_missing, which fails the
// transaction. The text form is the
// row's record_out text, compared as text: types without an equality
// operator (json, point) compare too, and it is what capture printed,
// under the same print settings (pinRowTextSQL). The rows are picked by
// ctid, so that of several equal rows only as many go as were deleted at
// the origin; it reads the whole table (a hash join of its rows' text
// with the wanted rows).
func keylessDeleteSQL(qname string) string {
	return `WITH want AS (SELECT w.r, pg_catalog.count(*) AS n FROM pg_catalog.unnest($1::pg_catalog.text[]) AS w(r) GROUP BY w.r),
	found AS (SELECT m.id FROM (SELECT x.ctid AS id, w.n, pg_catalog.row_number() OVER (PARTITION BY w.r) AS i
			FROM ONLY ` + qname + ` AS x JOIN want AS w ON (x.*)::pg_catalog.text OPERATOR(pg_catalog.=) w.r) AS m
		WHERE m.i OPERATOR(pg_catalog.<=) m.n),
	deleted AS (DELETE FROM ONLY ` + qname + ` AS x WHERE x.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT found.id FROM found))
		RETURNING (x.*)::pg_catalog.text AS r)
SELECT tashkent.keyless_row_missing(` + quoteLiteral(qname) + `, w.r)
FROM want AS w LEFT JOIN (SELECT d.r, pg_catalog.count(*) AS n FROM deleted AS d GROUP BY d.r) AS d ON d.r OPERATOR(pg_catalog.=) w.r
WHERE COALESCE(d.n, 0) OPERATOR(pg_catalog.<) w.n LIMIT 1`
}

// pinRowTextSQL pins, until unpinRowTextSQL, the print settings that the
// apply transaction does not pin already (setApplySettings) to capture's
// (extension/src/capture.c), so that a row's text here is byte for byte
// what capture printed of the same row. They are put back afterwards: the
// rest of the transaction (DDL above all) runs under the session's.
const (
	pinRowTextSQL = `SELECT pg_catalog.set_config('tashkent_apply.saved_timezone', pg_catalog.current_setting('TimeZone'), true),
	pg_catalog.set_config('tashkent_apply.saved_extra_float_digits', pg_catalog.current_setting('extra_float_digits'), true),
	pg_catalog.set_config('tashkent_apply.saved_bytea_output', pg_catalog.current_setting('bytea_output'), true),
	pg_catalog.set_config('TimeZone', 'UTC', true), pg_catalog.set_config('extra_float_digits', '1', true),
	pg_catalog.set_config('bytea_output', 'hex', true)`
	unpinRowTextSQL = `SELECT pg_catalog.set_config('TimeZone', pg_catalog.current_setting('tashkent_apply.saved_timezone'), true),
	pg_catalog.set_config('extra_float_digits', pg_catalog.current_setting('tashkent_apply.saved_extra_float_digits'), true),
	pg_catalog.set_config('bytea_output', pg_catalog.current_setting('tashkent_apply.saved_bytea_output'), true)`
)

// queueKeyless queues the statements applying k, the changes of the
// table without a primary key m: the deletes, then the inserts. A row to
// delete that the table does not have means this replica's data differs
// from the origin's: the statement fails (TK005), and with it the apply
// (the agent then halts the replica); it is never skipped.
func (at *attempt) queueKeyless(ctx context.Context, m *tableMeta, k *keylessRows) error {
	if len(k.deleted) > 0 {
		at.b.Queue(pinRowTextSQL)
		queueChecked(at.b, m.keylessDelete, "delete from", m.qname, k.deleted)
		at.b.Queue(unpinRowTextSQL)
	}
	ins := k.inserts()
	if at.copies(m, len(ins)) {
		return at.copyRows(ctx, m, len(ins), func(i int) []byte { return []byte(ins[i]) })
	}
	if len(ins) > 0 {
		queueChecked(at.b, m.insert, "insert into", m.qname, ins)
	}
	return nil
}

// queueTable queues the statements applying tr's changes of table m.
func (at *attempt) queueTable(ctx context.Context, m *tableMeta, tr *tableRows) error {
	if len(tr.order) > 0 && m.keyless {
		return fmt.Errorf("table %s has no primary key on this replica, but a version changes its rows by primary key", m.qname)
	}
	if tr.keyless != nil {
		if err := at.queueKeyless(ctx, m, tr.keyless); err != nil {
			return err
		}
	}
	var dels, ups []*certifierpb.Change
	for _, k := range tr.order {
		c := tr.last[k]
		if c.GetOp() == certifierpb.Op_OP_DELETE {
			dels = append(dels, c)
		} else {
			ups = append(ups, c)
		}
	}
	if at.deleteInsert || m.deferrablePK {
		if all := append(dels[:len(dels):len(dels)], ups...); len(all) > 0 {
			queueChecked(at.b, m.delete, "delete from", m.qname, keyArray(all))
		}
		return at.insert(ctx, m, ups)
	}
	if len(dels) > 0 {
		queueChecked(at.b, m.delete, "delete from", m.qname, keyArray(dels))
	}
	return at.upsert(ctx, m, tr, ups)
}

// add collapses c, an upsert or delete by key, into tr: the key's last
// change.
func (tr *tableRows) add(c *certifierpb.Change) {
	k := string(c.GetKey())
	prev, ok := tr.last[k]
	if !ok {
		tr.order = append(tr.order, k)
	}
	if ok && prev.GetOp() == certifierpb.Op_OP_DELETE && c.GetOp() == certifierpb.Op_OP_UPSERT {
		if tr.deletedFirst == nil {
			tr.deletedFirst = map[string]bool{}
		}
		tr.deletedFirst[k] = true
	}
	tr.last[k] = c
}

// mayExist reports whether the row of c, an upsert of the step, may exist
// here before the step: the origin's update kept it (keeps_row), or the
// step deleted its key first. The others are rows the replica lacks,
// unless it diverged or the writeset is one whose capture marks no row
// (an older version's, or an update of a table referenced through another
// unique index: copyableSQL).
func (tr *tableRows) mayExist(c *certifierpb.Change) bool {
	return c.GetKeepsRow() || tr.deletedFirst[string(c.GetKey())]
}

// changes returns tr's changes in their order.
func (tr *tableRows) changes() []*certifierpb.Change {
	out := make([]*certifierpb.Change, len(tr.order))
	for i, k := range tr.order {
		out[i] = tr.last[k]
	}
	return out
}

// rowArray returns the rows of upserts, for a text[] parameter.
func rowArray(cs []*certifierpb.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c.GetRow())
	}
	return out
}

// keyArray concatenates the keys (JSON arrays) of cs into one JSON array.
// They are not parsed here: PostgreSQL checks them.
func keyArray(cs []*certifierpb.Change) string {
	n := 2
	for _, c := range cs {
		n += len(c.GetKey()) + 1
	}
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteByte('[')
	for i, c := range cs {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.Write(c.GetKey())
	}
	sb.WriteByte(']')
	return sb.String()
}

// tableMetaSQL loads, for each schema-qualified table name in $1, whether
// it exists, its canonical quoted name, whether its primary key is
// deferrable (ON CONFLICT cannot use it), the DDL generation (the newest
// row of tashkent.ddl_log), its primary key columns and their types (in
// key order), its columns that can be inserted into (not generated), in
// order, whether each column not dropped can be inserted into (the fields
// of its record text), and whether it can be loaded by COPY (copyableSQL).
// format_type names a type as the session's search_path finds it (bare
// where that finds it, schema-qualified where not), so the names it gives
// mean the same types in the apply statements, which run under the same
// search_path.
const tableMetaSQL = `
SELECT t.name, c.oid IS NOT NULL, CASE WHEN c.oid IS NULL THEN '' ELSE pg_catalog.format('%I.%I', n.nspname, c.relname) END,
	coalesce((SELECT NOT i.indimmediate FROM pg_catalog.pg_index i
		WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary), false),
	(SELECT coalesce(pg_catalog.max(gen), 0) FROM tashkent.ddl_log),
	ARRAY(SELECT a.attname::pg_catalog.text
		FROM pg_catalog.pg_index i
		CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
		WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary AND k.ord OPERATOR(pg_catalog.<=) i.indnkeyatts ORDER BY k.ord),
	ARRAY(SELECT pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM pg_catalog.pg_index i
		CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
		WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary AND k.ord OPERATOR(pg_catalog.<=) i.indnkeyatts ORDER BY k.ord),
	ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
		WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
			AND a.attgenerated OPERATOR(pg_catalog.=) ''
		ORDER BY a.attnum),
	ARRAY(SELECT a.attgenerated OPERATOR(pg_catalog.=) '' FROM pg_catalog.pg_attribute a
		WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
		ORDER BY a.attnum),
	` + copyableSQL + `
FROM pg_catalog.unnest($1::pg_catalog.text[]) AS t(name)
LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(t.name)
LEFT JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace`

// copyableSQL says whether COPY loads rows into table c as the apply
// statements insert them, under session_replication_role = replica (rules
// and triggers enabled ALWAYS or REPLICA are the ones that act there).
// COPY fires the row triggers an INSERT fires, but ignores rules, and
// fires INSERT statement triggers only: where the statement is an upsert
// (ON CONFLICT DO UPDATE), PostgreSQL fires the UPDATE statement triggers
// too, and one statement becomes two where COPY takes some of a table's
// rows (copyRows). So a table with an INSERT or UPDATE rule, or an INSERT
// or UPDATE statement trigger (tgtype: ROW 1, INSERT 4, UPDATE 16), that
// acts in the applier is never loaded by COPY. Nor is a table that a
// foreign key references through a unique index other than its primary
// key: capture marks none of its updated rows keeps_row (an update that
// keeps the key may change the referenced value; extension relinfo.c,
// referenced_through_other_index), so COPY would take rows this replica
// has and fail.
const copyableSQL = `NOT EXISTS (SELECT FROM pg_catalog.pg_constraint f WHERE f.confrelid OPERATOR(pg_catalog.=) c.oid
		AND f.contype OPERATOR(pg_catalog.=) 'f'
		AND f.conindid IS DISTINCT FROM (SELECT i.indexrelid FROM pg_catalog.pg_index i
			WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary))
	AND NOT EXISTS (SELECT FROM pg_catalog.pg_rewrite r WHERE r.ev_class OPERATOR(pg_catalog.=) c.oid
		AND (r.ev_type OPERATOR(pg_catalog.=) '2' OR r.ev_type OPERATOR(pg_catalog.=) '3')
		AND (r.ev_enabled OPERATOR(pg_catalog.=) 'A' OR r.ev_enabled OPERATOR(pg_catalog.=) 'R'))
	AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger g WHERE g.tgrelid OPERATOR(pg_catalog.=) c.oid
		AND (g.tgenabled OPERATOR(pg_catalog.=) 'A' OR g.tgenabled OPERATOR(pg_catalog.=) 'R')
		AND (g.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 0
		AND (g.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 20) OPERATOR(pg_catalog.<>) 0)`

// indexMetaSQL loads, for each label $1[i] naming index $3[i] of table
// $2[i], the table's canonical quoted name (” if either is missing), and
// the index's key columns and their types, in index order.
const indexMetaSQL = `
SELECT t.label, coalesce(pg_catalog.format('%I.%I', n.nspname, c.relname), ''),
	ARRAY(SELECT a.attname::pg_catalog.text
		FROM pg_catalog.unnest(x.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
		WHERE k.ord OPERATOR(pg_catalog.<=) x.indnkeyatts ORDER BY k.ord),
	ARRAY(SELECT pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM pg_catalog.unnest(x.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
		WHERE k.ord OPERATOR(pg_catalog.<=) x.indnkeyatts ORDER BY k.ord)
FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($3::pg_catalog.text[])) AS t(label, tbl, idx)
LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(t.tbl)
LEFT JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
LEFT JOIN LATERAL (SELECT i.indkey, i.indnkeyatts FROM pg_catalog.pg_index i
	JOIN pg_catalog.pg_class ci ON ci.oid OPERATOR(pg_catalog.=) i.indexrelid
	WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisunique
		AND pg_catalog.format('%I', ci.relname) OPERATOR(pg_catalog.=) t.idx) AS x ON true`

// maxVersion is the largest version: versions travel as bigint.
const maxVersion = 1<<63 - 1
