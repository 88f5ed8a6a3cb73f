package capture_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// A table without a primary key: an INSERT is an INSERT_ROW of the new
// row, a DELETE a DELETE_ROW of the whole old row, an UPDATE both, deletes
// first; equal rows stay apart, never collapsed. Rows the transaction
// inserted and then deleted (or updated away) cancel out; a transaction
// whose changes all cancel out certifies nothing. TRUNCATE drops the
// table's earlier rows. A primary key added later switches the table to
// changes by key, and dropping it back.
func TestKeylessTableRows(t *testing.T) {
	f := start(t, `CREATE TABLE h (a int, b text)`, `CREATE TABLE hu (a int UNIQUE, b text)`)

	f.expect(`INSERT INTO h VALUES (1, 'x'), (1, 'x'), (2, NULL)`,
		`INSERT_ROW public.h (1,x)`, `INSERT_ROW public.h (1,x)`, `INSERT_ROW public.h (2,)`)
	f.expect(`UPDATE h SET b = 'y' WHERE a = 1`,
		`DELETE_ROW public.h (1,x)`, `DELETE_ROW public.h (1,x)`, `INSERT_ROW public.h (1,y)`, `INSERT_ROW public.h (1,y)`)
	f.expect(`DELETE FROM h WHERE a = 2`, `DELETE_ROW public.h (2,)`)

	// Inserted, updated, deleted in one transaction: nothing to certify.
	if ws := f.writesets(f.conn, `BEGIN; INSERT INTO h VALUES (3, 'a'); UPDATE h SET b = 'b' WHERE a = 3;
		DELETE FROM h WHERE a = 3; COMMIT`); len(ws) != 0 {
		t.Errorf("insert, update, delete of one row certified %q, want nothing", ws)
	}
	if got := f.query(f.conn, `SELECT count(*)::text FROM h WHERE a = 3`); !slices.Equal(got, []string{"0"}) {
		t.Errorf("rows left: %v", got)
	}
	// Inserted then updated: the final row only. An existing row updated
	// twice: its old row deleted, the last new row inserted.
	f.expect(`BEGIN; INSERT INTO h VALUES (4, 'a'); UPDATE h SET b = 'b' WHERE a = 4;
		UPDATE h SET b = 'c' WHERE a = 2 OR b = 'y'; UPDATE h SET b = 'd' WHERE b = 'c'; COMMIT`,
		`INSERT_ROW public.h (4,b)`, `DELETE_ROW public.h (1,y)`, `DELETE_ROW public.h (1,y)`,
		`INSERT_ROW public.h (1,d)`, `INSERT_ROW public.h (1,d)`)
	// A rolled-back savepoint takes its rows with it; an equal row
	// inserted twice and deleted once leaves one.
	f.expect(`BEGIN; INSERT INTO h VALUES (5, 'a'); SAVEPOINT s; INSERT INTO h VALUES (6, 'a'); DELETE FROM h WHERE a = 4;
		ROLLBACK TO s; INSERT INTO h VALUES (5, 'a'); DELETE FROM h WHERE ctid = (SELECT max(ctid) FROM h WHERE a = 5); COMMIT`,
		`INSERT_ROW public.h (5,a)`)
	f.expect(`BEGIN; INSERT INTO h VALUES (7, 'a'); TRUNCATE h; INSERT INTO h VALUES (8, 'a'); COMMIT`,
		`TRUNCATE public.h`, `INSERT_ROW public.h (8,a)`)
	// Unique indexes of a keyless table are certified as for any table.
	f.expect(`INSERT INTO hu VALUES (1, 'x')`, `INSERT_ROW public.hu (1,x)`, `UNIQUE_KEY public.hu#hu_a_key [1]`)
	f.expect(`UPDATE hu SET a = 2`, `DELETE_ROW public.hu (1,x)`, `INSERT_ROW public.hu (2,x)`,
		`UNIQUE_KEY public.hu#hu_a_key [1]`, `UNIQUE_KEY public.hu#hu_a_key [2]`)

	// The same session's cached table description follows the key.
	f.exec(f.conn, `ALTER TABLE h ADD PRIMARY KEY (a)`)
	f.expect(`UPDATE h SET b = 'e'`, `UPSERT public.h [8] (8,e) keeps`)
	f.exec(f.conn, `ALTER TABLE h DROP CONSTRAINT h_pkey`)
	f.expect(`UPDATE h SET b = 'f'`, `DELETE_ROW public.h (8,e)`, `INSERT_ROW public.h (8,f)`)
}

// Rows of keyless tables, with values printed under a session's odd print
// settings and of types without an equality operator (json, point), are
// applied on a second server by the applier, whose own session has other
// odd settings: updates and deletes find their rows, equal rows are
// deleted one for one, and both servers end with the same rows. A delete
// of a row the second server does not have fails the apply (TK005),
// naming the table and the row, and commits nothing.
func TestKeylessRowsApply(t *testing.T) {
	ctx := context.Background()
	schema := []string{
		`CREATE TABLE h (ts timestamptz, b bytea, f float8, j json, p point, iv interval, d date, v text)`,
		`CREATE TABLE g (a int, v text)`,
	}
	f := start(t, schema...)
	f.exec(f.conn, `SET TimeZone = 'Asia/Kolkata'; SET DateStyle = 'German, DMY'; SET IntervalStyle = 'iso_8601';
		SET bytea_output = 'escape'; SET extra_float_digits = 0`)
	workload := []string{
		`INSERT INTO h VALUES ('2024-01-02 03:04:05.678+01', '\x00ff27', 0.1, '{"k": [1, null]}', '(1.5,2)', '1 mon 2 days', '2024-02-29', 'a b'),
			('2024-01-02 03:04:05.678+01', '\x00ff27', 0.1, '{"k": [1, null]}', '(1.5,2)', '1 mon 2 days', '2024-02-29', 'a b'),
			(NULL, NULL, 1.0/3, '[]', '(0,0)', NULL, NULL, '')`,
		`UPDATE h SET v = 'c' WHERE ctid = (SELECT min(ctid) FROM h WHERE v = 'a b')`,
		`UPDATE h SET j = '{"k": 2}', p = '(3,4)' WHERE f < 0.2 AND f > 0.09`,
		`DELETE FROM h WHERE j::text = '[]'`,
		`INSERT INTO g SELECT i % 3, 'x' FROM generate_series(1, 9) AS i`,
		`DELETE FROM g WHERE ctid IN (SELECT ctid FROM g WHERE a = 1 LIMIT 2)`,
		`BEGIN; INSERT INTO g VALUES (7, 'y'); UPDATE g SET v = 'z' WHERE a = 7; UPDATE g SET a = 8 WHERE a = 0 AND ctid = (SELECT min(ctid) FROM g WHERE a = 0); COMMIT`,
	}
	var entries []*pb.LogEntry
	for _, sql := range workload {
		entries = f.logEntries(entries, f.conn, sql)
	}
	bconn := applyTarget(t, schema...)
	f.exec(bconn, `SET TimeZone = 'America/St_Johns'; SET bytea_output = 'escape'; SET extra_float_digits = -3`)
	applier := applyAll(t, bconn, entries)
	f.sameRows(bconn, "h", "g")

	// B loses a row A still has: deleting it on A cannot be applied on B.
	f.exec(bconn, `SET tashkent.maintenance = on; DELETE FROM g WHERE a = 2; RESET tashkent.maintenance`)
	before := len(f.agent.Requests())
	f.exec(f.conn, `DELETE FROM g WHERE a = 2`)
	reqs := f.agent.Requests()[before:]
	if len(reqs) != 1 {
		t.Fatalf("%d writesets", len(reqs))
	}
	err := applier.Apply(ctx, bconn, []*pb.LogEntry{{Version: uint64(len(entries) + 1), Writeset: reqs[0].Writeset}})
	if err == nil || !strings.Contains(err.Error(), "table public.g") || !strings.Contains(err.Error(), "has no row (2,x) to delete") || !strings.Contains(err.Error(), pgcode.KeylessRowMissing) {
		t.Fatalf("apply of a delete of a row this replica does not have: %v", err)
	}
	if v, err := replica.ReadVersion(ctx, bconn); err != nil || v != uint64(len(entries)) {
		t.Fatalf("after the failed apply, B is at version %d (%v), want %d: nothing of the version committed", v, err, len(entries))
	}
}
