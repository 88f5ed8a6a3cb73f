package replica

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

const captureSet = "tashkent_capture_del:%s,|tashkent_capture_ins:%s,|tashkent_capture_trunc:|tashkent_capture_upd:%s,"

func want(pk string) []string {
	if !strings.Contains(pk, ",") { // capture_key's second argument: the letter of a keeping update
		pk += ",M"
	}
	return strings.Split(strings.ReplaceAll(captureSet, "%s", pk), "|")
}

func TestInstallIdempotentAndTriggers(t *testing.T) {
	srv, c := instance(t, `
		CREATE TABLE pre (id int PRIMARY KEY, v text);
		CREATE TABLE pre_nopk (v text);
		CREATE SCHEMA "Odd Schema";
		CREATE TABLE "Odd Schema"."T x" ("K 1" text, k2 int, v text, PRIMARY KEY (k2, "K 1"));
		CREATE TEMP TABLE tmp (id int PRIMARY KEY);`)
	ctx := tctx(t)

	eqStrings(t, "pre", triggers(t, c, "pre"), want("id"))
	eqStrings(t, "pre_nopk", triggers(t, c, "pre_nopk"), []string{"tashkent_nopk:"})
	eqStrings(t, "odd", triggers(t, c, `"Odd Schema"."T x"`), want("k2,K 1"))
	eqStrings(t, "temp table", triggers(t, c, "pg_temp.tmp"), nil)
	eqStrings(t, "tashkent.applied", triggers(t, c, "tashkent.applied"), nil)

	// Install again, twice concurrently: no error, same triggers, and the
	// existing triggers are not recreated (same OIDs: no locks taken).
	oids := func() []uint32 {
		var o []uint32
		if err := c.QueryRow(ctx, `SELECT array_agg(oid ORDER BY oid) FROM pg_trigger WHERE tgname LIKE 'tashkent%'`).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	before := oids()
	conns := []*pgx.Conn{pgtest.Connect(t, srv, "postgres"), pgtest.Connect(t, srv, "postgres")}
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, cc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Install(ctx, cc)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Install: %v", err)
		}
	}
	if err := Install(ctx, c); err != nil {
		t.Fatal(err)
	}
	if after := oids(); !slices.Equal(before, after) {
		t.Errorf("reinstall recreated triggers: %v -> %v", before, after)
	}
	var evt string
	if err := c.QueryRow(ctx, `SELECT string_agg(evtname || ':' || evtenabled::text, ',' ORDER BY evtname) FROM pg_event_trigger`).Scan(&evt); err != nil {
		t.Fatal(err)
	}
	if want := "tashkent_ddl:A,tashkent_drop_trigger:A,tashkent_guard_ddl:A,tashkent_guard_drop:A"; evt != want {
		t.Errorf("event triggers = %q, want %q (enabled ALWAYS)", evt, want)
	}

	// Tables created and altered later get (and switch) triggers.
	mustExec(t, c, `CREATE TABLE later (a int, b text, PRIMARY KEY (b, a))`)
	eqStrings(t, "later", triggers(t, c, "later"), want("b,a"))
	mustExec(t, c, `CREATE TABLE later_as AS SELECT 1 AS id`)
	eqStrings(t, "CREATE TABLE AS", triggers(t, c, "later_as"), []string{"tashkent_nopk:"})
	mustExec(t, c, `ALTER TABLE later_as ADD PRIMARY KEY (id)`)
	eqStrings(t, "after ADD PRIMARY KEY", triggers(t, c, "later_as"), want("id"))
	mustExec(t, c, `ALTER TABLE later_as RENAME COLUMN id TO ident`)
	eqStrings(t, "after RENAME COLUMN", triggers(t, c, "later_as"), want("ident"))
	mustExec(t, c, `ALTER TABLE later_as DROP CONSTRAINT later_as_pkey`)
	eqStrings(t, "after DROP CONSTRAINT", triggers(t, c, "later_as"), []string{"tashkent_nopk:"})
	mustExec(t, c, `CREATE SCHEMA s2 CREATE TABLE st (id int PRIMARY KEY)`)
	eqStrings(t, "CREATE SCHEMA ... CREATE TABLE", triggers(t, c, "s2.st"), want("id"))
	mustExec(t, c, `CREATE TABLE parted (id int, r int, PRIMARY KEY (id, r)) PARTITION BY RANGE (r);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10)`)
	eqStrings(t, "partitioned", triggers(t, c, "parted"), want("id,r"))
	eqStrings(t, "partition", triggers(t, c, "parted_1"), want("id,r"))
	mustExec(t, c, `CREATE TABLE parted_2 (id int NOT NULL, r int NOT NULL); ALTER TABLE parted ATTACH PARTITION parted_2 FOR VALUES FROM (10) TO (20)`)
	eqStrings(t, "attached partition", triggers(t, c, "parted_2"), want("id,r"))
	mustExec(t, c, `CREATE TEMP TABLE tmp2 (id int PRIMARY KEY)`)
	eqStrings(t, "temp table created later", triggers(t, c, "pg_temp.tmp2"), nil)

	// The capture trigger follows the renamed key column.
	s := session(t, srv)
	mustExec(t, c, `ALTER TABLE later_as ADD PRIMARY KEY (ident)`)
	e := commitLocal(t, s, 1, `INSERT INTO later_as VALUES (7)`)
	eqStrings(t, "capture after rename", changes(e.GetWriteset().GetChanges()), []string{`U public.later_as [7] (7)`})
}

func TestCaptureCollapse(t *testing.T) {
	srv, _ := instance(t, `
		CREATE TABLE t (id int PRIMARY KEY, v text);
		CREATE TABLE other (id int PRIMARY KEY);
		CREATE TABLE comp (a int, b text, v int, PRIMARY KEY (a, b));
		INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, 'three'), (6, 'six');
		INSERT INTO other VALUES (1), (2);`)
	s := session(t, srv)
	ctx := tctx(t)

	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	mustExec(t, s, `
		INSERT INTO t VALUES (4, 'four');         -- insert
		UPDATE t SET v = 'uno' WHERE id = 1;      -- update
		UPDATE t SET v = 'UNO' WHERE id = 1;      -- and again: one upsert, last row
		UPDATE t SET id = 20 WHERE id = 2;        -- primary key change: delete 2, upsert 20
		DELETE FROM t WHERE id = 3;               -- delete
		INSERT INTO t VALUES (5, 'five');
		DELETE FROM t WHERE id = 5;               -- insert then delete: delete
		DELETE FROM t WHERE id = 6;
		INSERT INTO t VALUES (6, 'six again');    -- delete then insert: upsert
		UPDATE t SET v = v WHERE false;           -- no rows: nothing
		INSERT INTO other VALUES (3);
		TRUNCATE other;                           -- drops other's earlier changes
		INSERT INTO other VALUES (9);             -- after the truncate
		INSERT INTO comp VALUES (1, 'x''q', 10), (2, 'y', 20);
		UPDATE comp SET v = v + 1;`)
	if n := bufferLen(t, s); n == 0 {
		t.Fatal("buffer empty before collect")
	}
	ws, err := CollectWriteset(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "writeset", changes(ws), []string{
		`U public.t [4] (4,four)`,
		`U public.t [1] (1,UNO)`,
		`D public.t [2]`,
		`U public.t [20] (20,two)`,
		`D public.t [3]`,
		`D public.t [5]`,
		`U public.t [6] (6,"six again")`,
		`T public.other`,
		`U public.other [9] (9)`,
		`U public.comp [1,"x'q"] (1,x'q,11)`,
		`U public.comp [2,"y"] (2,y,21)`,
	})
	if n := bufferLen(t, s); n != 0 {
		t.Errorf("buffer holds %d rows after CollectWriteset", n)
	}
	ws2, err := CollectWriteset(ctx, tx)
	if err != nil || len(ws2) != 0 {
		t.Errorf("second collect: %v, %v; want empty", changes(ws2), err)
	}
	// More writes after a collect start a new writeset.
	mustExec(t, s, `UPDATE t SET v = 'late' WHERE id = 4`)
	ws3, err := CollectWriteset(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "after collect", changes(ws3), []string{`U public.t [4] (4,late)`})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// A rolled-back transaction (or savepoint) leaves nothing behind.
	tx, err = s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, s, `INSERT INTO t VALUES (100, 'x'); SAVEPOINT sp; INSERT INTO t VALUES (101, 'y'); ROLLBACK TO SAVEPOINT sp`)
	ws, err = CollectWriteset(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "savepoint", changes(ws), []string{`U public.t [100] (100,x)`})
	mustExec(t, s, `INSERT INTO t VALUES (102, 'z')`)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := bufferLen(t, s); n != 0 {
		t.Errorf("buffer holds %d rows after ROLLBACK", n)
	}
	// A write that committed without being collected (a caller's bug) does
	// not leak into the next transaction's writeset.
	mustExec(t, s, `INSERT INTO t VALUES (103, 'auto')`)
	tx, err = s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if ws, err := CollectWriteset(ctx, tx); err != nil || len(ws) != 0 {
		t.Errorf("writeset of an empty transaction after an autocommit write: %v, %v", changes(ws), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, s, `INSERT INTO t VALUES (104, 'auto')`)
	tx, err = s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	mustExec(t, s, `INSERT INTO t VALUES (105, 'mine')`)
	if ws, err := CollectWriteset(ctx, tx); err != nil {
		t.Fatal(err)
	} else {
		eqStrings(t, "after an uncollected commit", changes(ws), []string{`U public.t [105] (105,mine)`})
	}
}

func TestCaptureBufferStaysSmall(t *testing.T) {
	// Autovacuum never visits temporary tables, so the buffer's deleted
	// rows are not reclaimed by themselves; collect_writeset truncates it
	// once it passes 1 MB.
	srv, _ := instance(t, `CREATE TABLE big (id int PRIMARY KEY, pad text)`)
	s := session(t, srv)
	ctx := tctx(t)
	size := func() int64 {
		var n int64
		if err := s.QueryRow(ctx, `SELECT pg_relation_size('pg_temp.tashkent_writeset')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 0; i < 60; i++ {
		// 20 rows of 1 kB (stored inline, not TOASTed) per transaction:
		// 1.2 MB of writesets in all.
		e := commitLocal(t, s, uint64(i+1), fmt.Sprintf(`INSERT INTO big SELECT g, repeat('x', 1000) FROM generate_series(%d, %d) g`, i*20, i*20+19))
		if n := len(e.GetWriteset().GetChanges()); n != 20 {
			t.Fatalf("transaction %d: %d changes", i, n)
		}
		if sz := size(); sz > 1<<20+64<<10 {
			t.Fatalf("buffer is %d bytes after %d transactions", sz, i+1)
		}
	}
}

func TestCapturePrimaryKeySwap(t *testing.T) {
	// UPDATE s SET id = 3 - id swaps two keys in one statement (a
	// deferrable key allows it). Per row this would look like "delete 1,
	// upsert 2, delete 2, upsert 1"; the writeset must be two upserts.
	srcSrv, src := instance(t, `CREATE TABLE s (id int PRIMARY KEY DEFERRABLE, v text);
		INSERT INTO s VALUES (1, 'a'), (2, 'b'), (3, 'c');`)
	_, dst := applyInstance(t, `CREATE TABLE s (id int PRIMARY KEY DEFERRABLE, v text);
		INSERT INTO s VALUES (1, 'a'), (2, 'b'), (3, 'c');`)
	e := commitLocal(t, session(t, srcSrv), 1, `UPDATE s SET id = 3 - id WHERE id IN (1, 2); UPDATE s SET id = 30 WHERE id = 3`)
	got := changes(e.GetWriteset().GetChanges())
	slices.Sort(got)
	eqStrings(t, "swap", got, []string{
		`D public.s [3]`,
		`U public.s [1] (1,b)`,
		`U public.s [2] (2,a)`,
		`U public.s [30] (30,c)`,
	})
	if err := Apply(tctx(t), dst, []*certifierpb.LogEntry{e}); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, src), checksum(t, dst))
}

func TestWritesOutsideProxyRejected(t *testing.T) {
	srv, c := instance(t, `CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE nopk (v text);
		INSERT INTO nopk VALUES ('x')`)
	ctx := tctx(t)
	direct := pgtest.Connect(t, srv, "postgres") // no PrepareSession: bypasses the proxy

	for _, sql := range []string{
		`INSERT INTO t VALUES (1, 'x')`,
		`TRUNCATE t`,
	} {
		_, err := direct.Exec(ctx, sql)
		pe := pgErr(t, err)
		if pe.Code != CodeNotReplicable || !strings.Contains(pe.Message, "writes must go through the tashkent proxy") ||
			!strings.Contains(pe.Hint, "tashkent proxy") {
			t.Errorf("%s outside the proxy: code %s message %q hint %q", sql, pe.Code, pe.Message, pe.Hint)
		}
	}
	// Statements that change nothing are let through.
	if _, err := direct.Exec(ctx, `UPDATE t SET v = 'y' WHERE id = 42`); err != nil {
		t.Errorf("no-op UPDATE outside the proxy: %v", err)
	}
	var n int
	if err := direct.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 0 {
		t.Errorf("rejected insert left %d rows (%v)", n, err)
	}

	// Through the proxy, a table without a primary key is refused with a
	// hint that says how to fix it.
	s := session(t, srv)
	for _, sql := range []string{
		`INSERT INTO nopk VALUES ('y')`,
		`UPDATE nopk SET v = 'z'`,
		`DELETE FROM nopk`,
		`TRUNCATE nopk`,
	} {
		_, err := s.Exec(ctx, sql)
		pe := pgErr(t, err)
		if pe.Code != CodeNotReplicable || pe.Message != "table public.nopk has no primary key; tashkent cannot replicate writes to it" ||
			pe.Hint != "ALTER TABLE public.nopk ADD PRIMARY KEY (...)" {
			t.Errorf("%s: code %s message %q hint %q", sql, pe.Code, pe.Message, pe.Hint)
		}
	}
	// Fixing the table as the hint says makes it writable and captured.
	mustExec(t, c, `ALTER TABLE nopk ADD PRIMARY KEY (v)`)
	e := commitLocal(t, s, 1, `INSERT INTO nopk VALUES ('y')`)
	eqStrings(t, "after ADD PRIMARY KEY", changes(e.GetWriteset().GetChanges()), []string{`U public.nopk ["y"] (y)`})

	// An unprepared session cannot collect.
	if _, err := CollectWriteset(ctx, direct); err == nil || !strings.Contains(err.Error(), "PrepareSession") {
		t.Errorf("collect on an unprepared session: %v", err)
	}
}

func TestCaptureCanonicalValues(t *testing.T) {
	// The key must be the same text whatever the client's settings, or two
	// replicas would name the same row differently and the certifier would
	// miss the conflict.
	srv, _ := instance(t, `CREATE TABLE ev (at timestamptz PRIMARY KEY, d interval, b bytea, f float8)`)
	s := session(t, srv)
	mustExec(t, s, `SET TimeZone = 'Asia/Tokyo'; SET IntervalStyle = 'sql_standard'; SET bytea_output = 'escape';
		SET extra_float_digits = -3; SET DateStyle = 'SQL, DMY'`)
	e := commitLocal(t, s, 1, `INSERT INTO ev VALUES ('2024-01-02 12:00:00+09', '-1 day +2 hours', '\x00ff', 0.1)`)
	eqStrings(t, "canonical", changes(e.GetWriteset().GetChanges()), []string{
		`U public.ev ["2024-01-02T03:00:00+00:00"] ("2024-01-02 03:00:00+00","-1 days +02:00:00","\\x00ff",0.1)`,
	})
	var tz string
	if err := s.QueryRow(tctx(t), `SELECT current_setting('TimeZone')`).Scan(&tz); err != nil || tz != "Asia/Tokyo" {
		t.Errorf("the capture trigger changed the client's TimeZone: %q %v", tz, err)
	}
}

func TestCollapseUnit(t *testing.T) {
	ev := func(tbl string, op byte, key, row string) Event {
		e := Event{Table: tbl, Op: op}
		if key != "" {
			e.Key = []byte(key)
		}
		if row != "" {
			e.Row = []byte(row)
		}
		return e
	}
	got, err := Collapse([]Event{
		ev("a", 'U', "[1]", "r1"),
		ev("b", 'U', "[1]", "b1"),
		ev("a", 'U', "[2]", "r2"),
		ev("a", 'T', "", ""),
		ev("b", 'T', "", ""), // TRUNCATE a, b: adjacent
		ev("a", 'U', "[1]", "r1'"),
		ev("a", 'D', "[1]", ""),
		ev("a", 'T', "", ""), // earlier truncates stay (barriers), later row changes go
		ev("c", 'D', "[5]", ""),
		ev("c", 'U', "[5]", "c5"),
	})
	if err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "collapse", changes(got), []string{"T a", "T b", "T a", "U c [5] c5"})
	if _, err := Collapse([]Event{ev("a", 'X', "[1]", "")}); err == nil {
		t.Error("unknown op accepted")
	}
	if _, err := Collapse([]Event{ev("a", 'U', "", "r")}); err == nil {
		t.Error("keyless row event accepted")
	}
}
