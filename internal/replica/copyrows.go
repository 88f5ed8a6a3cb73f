package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// copyRowsMin is the fewest rows of one table in a step that are inserted
// with COPY rather than by the statement (Applier.copyRowsMin). COPY is a
// round trip of its own (what is queued before it is sent first), and
// parses each row once instead of as an element of a text[] and again as
// a record: it pays off for large transactions (a span's 4 MiB fragments
// hold tens of thousands of rows), and would only add a round trip to the
// short writesets of an ordinary run, whose tables have a few rows each
// (BenchmarkApplyInserts: 0.9x the statement's rate at 100 rows, 1.2x at
// 1,000, 2x at 10,000).
const copyRowsMin = 1000

// attempt is one try at applying a plan: its statements on their way to
// the database, in order, and how it applies rows (see retries).
type attempt struct {
	tg target
	b  *pgx.Batch // queued and not sent yet
	// deleteInsert: every key is deleted before the rows are inserted,
	// instead of upserted.
	deleteInsert bool
	// copyRowsMin: inserts of at least so many rows of a table go by COPY
	// (copyRows); 0: none do.
	copyRowsMin int
	copied      bool  // COPY was used
	rows        int64 // rows loaded by COPY statements that succeeded
	counts      *CopyCounts
}

// attempt starts the next attempt at an apply, on tg, as r says.
func (a *Applier) attempt(tg target, r *retries) *attempt {
	at := &attempt{tg: tg, b: &pgx.Batch{}, deleteInsert: r.deleteInsert, copyRowsMin: a.copyRowsMin, counts: a.Copies}
	if r.noCopy {
		at.copyRowsMin = 0
	}
	return at
}

// succeeded counts the rows the attempt, which succeeded, loaded by COPY.
func (at *attempt) succeeded() {
	at.counts.rows.Add(at.rows)
}

// flush sends the statements queued and waits for their results.
func (at *attempt) flush(ctx context.Context) error {
	if at.b.Len() == 0 {
		return nil
	}
	b := at.b
	at.b = &pgx.Batch{}
	return at.tg.sendBatch(ctx, b).Close()
}

// copies reports whether n rows of table m are to be inserted by COPY.
func (at *attempt) copies(m *tableMeta, n int) bool {
	return at.copyRowsMin > 0 && m.copy != "" && !m.copyRefused.Load() && n >= at.copyRowsMin
}

// insert inserts ups, rows whose keys the step deleted first: by COPY if
// there are enough of them, else by the INSERT statement.
func (at *attempt) insert(ctx context.Context, m *tableMeta, ups []*certifierpb.Change) error {
	if at.copies(m, len(ups)) {
		return at.copyRows(ctx, m, len(ups), func(i int) []byte { return ups[i].GetRow() })
	}
	if len(ups) > 0 {
		queueChecked(at.b, m.insert, "insert into", m.qname, rowArray(ups))
	}
	return nil
}

// upsert applies ups, tr's rows that may or may not exist, as the upsert
// statement (INSERT ... ON CONFLICT DO UPDATE) does. The rows that do not
// exist here as far as the writeset tells (not tr.mayExist) go by COPY if
// there are enough of them, as plain inserts, after the upsert of the
// others. For a row that does not exist, the upsert is a plain insert;
// COPY fails with a unique violation on one that does (a row this
// replica has and the origin had not, or one the writeset does not
// mark), and the apply is then made again with the statements alone
// (retries.again), which leave the rows as they would have in any case.
func (at *attempt) upsert(ctx context.Context, m *tableMeta, tr *tableRows, ups []*certifierpb.Change) error {
	n := 0
	for _, c := range ups {
		if !tr.mayExist(c) {
			n++
		}
	}
	if !at.copies(m, n) {
		if len(ups) > 0 {
			queueChecked(at.b, m.upsert, "upsert into", m.qname, rowArray(ups))
		}
		return nil
	}
	kept, inserted := make([]*certifierpb.Change, 0, len(ups)-n), make([]*certifierpb.Change, 0, n)
	for _, c := range ups {
		if tr.mayExist(c) {
			kept = append(kept, c)
		} else {
			inserted = append(inserted, c)
		}
	}
	if len(kept) > 0 {
		queueChecked(at.b, m.upsert, "upsert into", m.qname, rowArray(kept))
	}
	return at.copyRows(ctx, m, len(inserted), func(i int) []byte { return inserted[i].GetRow() })
}

// copyRows inserts n rows of table m, row(i) the record text of the i-th,
// with COPY, after sending what is queued. The rows' COPY lines are made
// as COPY reads them, never all at once.
func (at *attempt) copyRows(ctx context.Context, m *tableMeta, n int, row func(int) []byte) error {
	at.copied = true
	if err := at.flush(ctx); err != nil {
		return err
	}
	rd := &copyReader{n: n, row: row, fields: m.fields}
	_, err := at.tg.pg.CopyFrom(ctx, rd, m.copy)
	if rerr := rd.failure(); rerr != nil {
		err = rerr
	}
	if err != nil {
		return &copyError{m: m, err: err}
	}
	at.rows += int64(n)
	return nil
}

// copyError is the failure of a COPY statement into table m.
type copyError struct {
	m   *tableMeta
	err error
}

func (e *copyError) Error() string { return "copy into " + e.m.qname + ": " + e.err.Error() }
func (e *copyError) Unwrap() error { return e.err }

// refuseCopyInto remembers, on its table's metadata, a COPY that failed
// on an integrity constraint with err: a row it took for new exists here
// (one the writeset does not mark), and the next attempts and fragments
// would meet the same rows. An integrity constraint that fails elsewhere
// (a statement, the COMMIT) leaves COPY as it was.
func refuseCopyInto(err error) {
	var ce *copyError
	if errors.As(err, &ce) && pgcode.Class(pgcode.Of(err)) == pgcode.IntegrityConstraintViolation {
		ce.m.copyRefused.Store(true)
	}
}

// copyRefused reports the failures of an attempt that used COPY after
// which the statements are to apply the same rows again (retries.again):
// an integrity constraint (SQLSTATE class 23: a unique violation where
// the upsert updates the row that exists; a table's rows applied in two
// statements, some upserted and then others copied, where the upsert
// applied them in one, in another order), or a row text that
// appendCopyLine does not read (record_in is to judge it).
func copyRefused(err error) bool {
	return errors.Is(err, errMalformedRecord) || pgcode.Class(pgcode.Of(err)) == pgcode.IntegrityConstraintViolation
}

// copyReader is the COPY data of rows, made line by line as COPY reads
// it. COPY reads it in a goroutine of its own (pgconn.CopyFrom), which
// may still run after CopyFrom returned on a broken connection: the
// error it stopped at is read under mu.
type copyReader struct {
	n      int
	row    func(int) []byte
	fields []bool // the table's record fields: true for those COPY takes
	next   int    // the row the next line is made of
	line   []byte // the line being read
	off    int    // how much of line was read

	mu  sync.Mutex
	err error
}

func (r *copyReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if r.off == len(r.line) {
			if r.next == r.n {
				if n > 0 {
					return n, nil
				}
				return 0, io.EOF
			}
			line, err := appendCopyLine(r.line[:0], r.row(r.next), r.fields)
			if err != nil {
				err = fmt.Errorf("row %d of %d: %w", r.next+1, r.n, err)
				r.mu.Lock()
				r.err = err
				r.mu.Unlock()
				return n, err
			}
			r.line, r.off = line, 0
			r.next++
		}
		c := copy(p[n:], r.line[r.off:])
		r.off += c
		n += c
	}
	return n, nil
}

// failure is the error the reader stopped at, nil if none.
func (r *copyReader) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// CopyCounts counts what the applier's COPY did: the rows it loaded in
// apply calls that succeeded, and the attempts that used it made again by
// the statements alone. The Appliers of a process may share one (the
// agent's metrics read it).
type CopyCounts struct {
	rows, fallbacks atomic.Int64
}

// Read returns the rows COPY loaded and the fallbacks so far.
func (c *CopyCounts) Read() (rows, fallbacks int64) {
	return c.rows.Load(), c.fallbacks.Load()
}

func (c *CopyCounts) fellBack() { c.fallbacks.Add(1) }
