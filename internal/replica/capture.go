package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

// Querier is what the functions of this package need from a connection:
// *pgx.Conn, pgx.Tx and *pgxpool.Pool all satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLSTATE codes this package's database objects raise.
const (
	// CodeNotReplicable (object_not_in_prerequisite_state) is raised for a
	// write that tashkent cannot replicate: to a table without a primary
	// key, or from a session that bypasses the proxy.
	CodeNotReplicable = "55000"
)

// WritesetBuffer is the name of the session's writeset buffer, a
// temporary table (PrepareSession; the sealed buffer in doc.go).
const WritesetBuffer = "tashkent_writeset"

// Install creates or updates the tashkent schema in the connected
// database: the tashkent.applied version table, the capture and guard
// trigger functions, the triggers on every existing user table, and the
// event trigger that installs them on tables created or altered later. It
// is idempotent and safe to run concurrently; it needs a superuser (event
// triggers do).
//
// tashkent.capture_key, the capture of most tables, is C where the server
// headers and a compiler are installed here and the server can load the
// library, and PL/pgSQL otherwise, with a warning (CaptureAuto; see
// "Capture in C" in doc.go). InstallCapture chooses.
func Install(ctx context.Context, conn *pgx.Conn) error {
	return InstallCapture(ctx, conn, CaptureAuto, nil)
}

// PrepareSession sets up writeset capture in the connection's session:
// it creates the session's writeset buffer (a temporary table) and turns
// capture on. The proxy calls it once on every backend connection it
// opens, outside any transaction. A write from a session that did not call
// it fails with SQLSTATE 55000. DISCARD ALL / DISCARD TEMP / RESET ALL undo
// it; call it again afterwards.
func PrepareSession(ctx context.Context, conn Querier) error {
	if _, err := conn.Exec(ctx, PrepareSessionSQL); err != nil {
		return fmt.Errorf("replica: prepare session: %w", err)
	}
	return nil
}

// Event is one row of the writeset buffer, as CollectSQL returns it.
type Event struct {
	Table string // schema-qualified, quoted; "<table>#<index>" for 'K' (and 'R' through a unique index)
	Op    byte   // 'U' upsert, 'M' keeping update, 'D' delete, 'T' truncate, 'K' unique index value, 'R' referenced parent key
	Key   []byte // JSON array of the primary key (or 'K': index, 'R': parent key) values; nil for 'T'
	Row   []byte // the new row in its text form ('U' and 'M' only)
}

// CollectWriteset returns the writeset of the transaction open on conn
// and empties the session's buffer, in one round trip. The proxy calls it
// inside the client's transaction, just before COMMIT. The result holds
// the last change per (table, key), ordered by the key's first appearance;
// a TRUNCATE drops the table's earlier changes and keeps its place in the
// order; then the values of unique indexes the transaction took or freed
// (see Collapse), and the parent keys its new rows reference. It is empty
// for a read-only transaction.
//
// The buffer is sealed (see "Trust model" in doc.go): CollectWriteset
// needs a superuser's session; a session of any other role collects with
// CollectWritesetWithToken.
func CollectWriteset(ctx context.Context, conn Querier) ([]*certifierpb.Change, error) {
	ws, err := collect(ctx, conn, CollectSQL)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, TrimSQL, nil); err != nil { // a superuser's session needs no token
		return nil, fmt.Errorf("replica: trim the writeset buffer: %w", err)
	}
	return ws, nil
}

// CollectWritesetWithToken is CollectWriteset for a session of any role,
// as the proxy collects in a client's session: token is the database's
// record token (ReadRecordToken), which a superuser's connection reads.
// It runs CollectQuery and then TrimSQL.
func CollectWritesetWithToken(ctx context.Context, conn Querier, token string) ([]*certifierpb.Change, error) {
	ws, err := collect(ctx, conn, CollectQuery, token)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, TrimSQL, token); err != nil {
		return nil, fmt.Errorf("replica: trim the writeset buffer: %w", err)
	}
	return ws, nil
}

func collect(ctx context.Context, conn Querier, sql string, args ...any) ([]*certifierpb.Change, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, collectErr(err)
	}
	defer rows.Close()
	var evs []Event
	for rows.Next() {
		var e Event
		var op string
		if err := rows.Scan(&e.Table, &op, &e.Key, &e.Row); err != nil {
			return nil, fmt.Errorf("replica: collect writeset: %w", err)
		}
		if len(op) != 1 {
			return nil, fmt.Errorf("replica: collect writeset: bad op %q", op)
		}
		e.Op = op[0]
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, collectErr(err)
	}
	return Collapse(evs)
}

func collectErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") { // no buffer; no temporary schema at all
		return fmt.Errorf("replica: collect writeset: session not prepared (call PrepareSession): %w", err)
	}
	return fmt.Errorf("replica: collect writeset: %w", err)
}

// Collapse turns a transaction's row events, in the order they happened,
// into its writeset: one change per (table, key), the last one (an insert
// then updates is one upsert of the final row; anything then a delete is a
// delete), placed where the key first appeared. A TRUNCATE removes the
// table's earlier row changes and is kept, in place, as a barrier: row
// changes after it follow it. Consecutive TRUNCATEs (one TRUNCATE a, b
// statement) stay adjacent, so that Apply can run them as one statement.
//
// Unique index values ('K') become OP_UNIQUE_KEY changes, one per (index,
// values) however often the transaction took or freed them, after all the
// row changes, sorted by index and values. A TRUNCATE does not remove
// them: the transaction did write or free those values, and certifying a
// key too many can only cause a spurious conflict.
//
// A keeping update ('M': an UPDATE that moved no primary key, of a table
// no foreign key references through other columns, see capture_key) is an
// upsert with KeepsRow set, which certification does not hold against
// concurrent references to the row (certification.KeepingWrite). The key's
// change keeps KeepsRow only if every event of the key in the transaction
// was 'M': an insert then updates is a plain upsert, anything then a delete
// is a delete.
//
// Referenced parent keys ('R') become OP_REFERENCE changes, last, one per
// (parent, key), sorted, except those the writeset already writes as a row
// change or unique value: a write of the key, keeping or not, conflicts
// with everything a reference to it would.
func Collapse(evs []Event) ([]*certifierpb.Change, error) {
	out := make([]*certifierpb.Change, 0, len(evs))
	pos := make(map[tableKey]int, len(evs))
	removed := 0
	var uniq, refs []*certifierpb.Change
	var seen, referenced map[tableKey]bool
	for _, e := range evs {
		switch e.Op {
		case 'R':
			if len(e.Key) == 0 {
				return nil, fmt.Errorf("replica: reference event on %s without a key", e.Table)
			}
			k := tableKey{e.Table, string(e.Key)}
			if referenced == nil {
				referenced = map[tableKey]bool{}
			}
			if !referenced[k] {
				referenced[k] = true
				refs = append(refs, &certifierpb.Change{Table: e.Table, Op: certifierpb.Op_OP_REFERENCE, Key: e.Key})
			}
		case 'K':
			if len(e.Key) == 0 {
				return nil, fmt.Errorf("replica: unique index event on %s without a key", e.Table)
			}
			k := tableKey{e.Table, string(e.Key)}
			if seen == nil {
				seen = map[tableKey]bool{}
			}
			if !seen[k] {
				seen[k] = true
				uniq = append(uniq, &certifierpb.Change{Table: e.Table, Op: certifierpb.Op_OP_UNIQUE_KEY, Key: e.Key})
			}
		case 'T':
			for k, i := range pos {
				if k.tbl == e.Table {
					out[i] = nil
					delete(pos, k)
					removed++
				}
			}
			out = append(out, &certifierpb.Change{Table: e.Table, Op: certifierpb.Op_OP_TRUNCATE})
		case 'U', 'M', 'D':
			if len(e.Key) == 0 {
				return nil, fmt.Errorf("replica: event on %s without a key", e.Table)
			}
			c := &certifierpb.Change{Table: e.Table, Key: e.Key}
			if e.Op == 'D' {
				c.Op = certifierpb.Op_OP_DELETE
			} else {
				c.Op = certifierpb.Op_OP_UPSERT
				c.Row = e.Row
				c.KeepsRow = e.Op == 'M'
			}
			k := tableKey{e.Table, string(e.Key)}
			if i, ok := pos[k]; ok {
				c.KeepsRow = c.KeepsRow && out[i].KeepsRow // every event 'M'
				out[i] = c
			} else {
				pos[k] = len(out)
				out = append(out, c)
			}
		default:
			return nil, fmt.Errorf("replica: unknown event op %q on %s", e.Op, e.Table)
		}
	}
	if removed > 0 {
		j := 0
		for _, c := range out {
			if c != nil {
				out[j] = c
				j++
			}
		}
		clear(out[j:])
		out = out[:j]
	}
	// In a fixed order, so that a transaction's writeset does not depend on
	// how the capture trigger's queries happened to return the values.
	slices.SortFunc(uniq, compareChanges)
	refs = slices.DeleteFunc(refs, func(c *certifierpb.Change) bool {
		k := tableKey{c.Table, string(c.Key)}
		_, written := pos[k]
		return written || seen[k]
	})
	slices.SortFunc(refs, compareChanges)
	out = append(out, uniq...)
	return append(out, refs...), nil
}

// tableKey is a (table, key) pair of a writeset.
type tableKey struct{ tbl, key string }

func compareChanges(a, b *certifierpb.Change) int {
	if c := strings.Compare(a.Table, b.Table); c != 0 {
		return c
	}
	return bytes.Compare(a.Key, b.Key)
}

// ReadRecordToken returns the secret with which a client's session records
// a committed version (RecordVersionSQL's $2). Install draws it; only a
// superuser may read it.
//
// Deprecated: the proxy's; the extension records versions itself.
func ReadRecordToken(ctx context.Context, q Querier) (string, error) {
	var token string
	if err := q.QueryRow(ctx, readRecordTokenSQL).Scan(&token); err != nil {
		return "", fmt.Errorf("replica: read the record token: %w", err)
	}
	return token, nil
}

// IsVersionGap reports the error of recording a version whose predecessor
// the database does not hold (see RecordVersionSQL): it lost commits, and
// must be caught up from its recorded version before anything else commits.
//
// Deprecated: the proxy's; the extension's commit order has no gaps.
func IsVersionGap(code, schema, table string) bool {
	return code == "23502" && schema == "tashkent" && table == "applied"
}

// ReadVersion returns the replica's version, tashkent.committed_version()
// of the extension: every version up to it is committed and visible, and
// PostgreSQL's crash recovery restores it with the commits it kept.
func ReadVersion(ctx context.Context, q Querier) (uint64, error) {
	var v int64
	if err := q.QueryRow(ctx, readVersionSQL).Scan(&v); err != nil {
		return 0, fmt.Errorf("replica: read version: %w", err)
	}
	return uint64(v), nil
}

// PruneApplied deletes the rows of tashkent.applied older than the keep
// most recent versions (keep >= 1: the highest version always stays) and
// returns how many it deleted.
//
// Deprecated: the proxy's; the extension keeps no table of versions.
func PruneApplied(ctx context.Context, q Querier, keep uint64) (int64, error) {
	if keep < 1 || keep > maxVersion {
		return 0, fmt.Errorf("replica: prune applied: keep must be >= 1, got %d", keep)
	}
	tag, err := q.Exec(ctx, pruneAppliedSQL, int64(keep))
	if err != nil {
		return 0, fmt.Errorf("replica: prune applied: %w", err)
	}
	return tag.RowsAffected(), nil
}

const maxVersion = 1<<63 - 1
