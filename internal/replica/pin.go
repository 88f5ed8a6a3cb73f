package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pin is a snapshot of the replica's database kept open at one version:
// a connection in a REPEATABLE READ transaction whose snapshot is taken.
// Versions become visible strictly in order (extension/src/turn.c), so a
// snapshot at Version sees exactly the versions up to it, and reads
// through it give every row as it was at that version while the replica
// moves on. A rewind reads the rows it restores through one (Undo).
//
// A pin holds back vacuum while it is open (its transaction's xmin): Pins
// keeps few, and replaces them often.
type Pin struct {
	// Version is the newest version the snapshot holds
	// (tashkent.snapshot_version()).
	Version uint64
	// Taken is when the snapshot was taken.
	Taken time.Time
	conn  *pgx.Conn
}

// takePinSQL takes the snapshot (the transaction's first statement) and
// reads its version; the print settings stay pinned for the transaction,
// so that the rows read through it print as capture prints them
// (extension/src/capture.c) and parse back with record_in.
const takePinSQL = `SELECT tashkent.snapshot_version(), pg_catalog.set_config('TimeZone', 'UTC', true),
	pg_catalog.set_config('DateStyle', 'ISO, YMD', true),
	pg_catalog.set_config('IntervalStyle', 'postgres', true),
	pg_catalog.set_config('extra_float_digits', '1', true),
	pg_catalog.set_config('bytea_output', 'hex', true)`

// TakePin opens a pin on conn, which must be idle (not in a transaction)
// and must stay the pin's while the pin is open. The connection must not time out
// idle transactions (the agent's connections set
// idle_in_transaction_session_timeout = 0).
func TakePin(ctx context.Context, conn *pgx.Conn, now time.Time) (*Pin, error) {
	if st := conn.PgConn().TxStatus(); st != 'I' {
		return nil, fmt.Errorf("replica: take a pin: connection is in a transaction (status %q)", st)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	var version int64
	b.Queue(takePinSQL).QueryRow(func(row pgx.Row) error {
		var ignored [5]string
		return row.Scan(&version, &ignored[0], &ignored[1], &ignored[2], &ignored[3], &ignored[4])
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		_ = rollback(ctx, conn)
		return nil, fmt.Errorf("replica: take a pin: %w", err)
	}
	return &Pin{Version: uint64(version), Taken: now, conn: conn}, nil
}

// release ends the pin's transaction; the connection is idle again.
func (p *Pin) release(ctx context.Context) error {
	return rollback(ctx, p.conn)
}

// readRows returns, for each query (a SELECT of one text column), the
// rows it reads through the pin, in one round trip.
func (p *Pin) readRows(ctx context.Context, queries []pinQuery) ([][]string, error) {
	out := make([][]string, len(queries))
	b := &pgx.Batch{}
	for i, q := range queries {
		b.Queue(q.sql, q.args...).Query(func(rows pgx.Rows) error {
			texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("%s: %w", q.what, err)
			}
			out[i] = texts
			return nil
		})
	}
	if err := p.conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read through the pin at version %d: %w", p.Version, err)
	}
	return out, nil
}

// pinQuery is one query readRows runs.
type pinQuery struct {
	what string // for errors: what it reads
	sql  string
	args []any
}
