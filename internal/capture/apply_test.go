package capture_test

import (
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// What capture certifies applies: the writesets of a workload captured on
// server A, applied in order by the applier (internal/replica) on server
// B, with the same tables, leave B's tables equal to A's.
func TestCapturedWritesetsApply(t *testing.T) {
	schema := []string{
		`CREATE TABLE t (id int PRIMARY KEY, v text, n numeric, ts timestamptz, b bytea, j jsonb, arr text[], iv interval, f float8)`,
		`CREATE TABLE k (a text, b timestamp, c uuid, d date, n numeric, v int, PRIMARY KEY (a, b, c, d, n))`,
		`CREATE TABLE tz (at timestamptz PRIMARY KEY, v int)`,
		`CREATE TABLE ak (a int[], s text[], v int, PRIMARY KEY (a, s))`,
		`CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE)`,
		`CREATE TABLE m (id int, k int, v text, PRIMARY KEY (id, k)) PARTITION BY LIST (k)`,
		`CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1)`,
		`CREATE TABLE m2 PARTITION OF m FOR VALUES IN (2)`,
		`CREATE TABLE p (id int PRIMARY KEY, v int)`,
		`CREATE TABLE c (id int PRIMARY KEY, pid int REFERENCES p ON DELETE CASCADE)`,
	}
	f := start(t, append(schema,
		// On A the table has a dropped column, on B it never had one.
		`CREATE TABLE dropped (id int NOT NULL, x int, v text)`,
		`ALTER TABLE dropped DROP COLUMN x, ADD PRIMARY KEY (id)`)...)
	odd := f.agent.Connect("postgres")
	f.exec(odd, `SET TimeZone = 'Asia/Kolkata'; SET DateStyle = 'German, DMY'; SET IntervalStyle = 'iso_8601';
		SET bytea_output = 'escape'; SET extra_float_digits = 0`)

	workload := []string{
		`INSERT INTO t VALUES (1, E'a "q" \\ (x), y', 1.50, '2024-01-02 03:04:05.678+01', '\x00ff27', '{"k": [1, null]}',
			'{"a b", "c,d", NULL, "e\"f"}', '1 mon 2 days 03:04:05', 0.1), (2, NULL, 'NaN', NULL, NULL, 'null', '{}', NULL, '-Infinity')`,
		`UPDATE t SET v = '', f = 1.0/3 WHERE id = 1`,
		`INSERT INTO k VALUES ('x', '2024-02-29 23:59:59.999999', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', 1.10, 1),
			(E'new\nline', '1999-12-31 00:00:00', '00000000-0000-0000-0000-000000000000', '0001-01-01 BC', -0.5, 2)`,
		`UPDATE k SET v = v + 10`,
		`DELETE FROM k WHERE v = 12`,
		`INSERT INTO tz VALUES ('2024-03-10 02:30:00', 1), ('infinity', 2)`,
		`DELETE FROM tz WHERE v = 1`,
		`INSERT INTO ak VALUES ('{1,2}', '{"x y",z}', 1), ('{}', '{NULL}', 2), ('{3}', '{}', 3)`,
		`DELETE FROM ak WHERE v <> 3`,
		`INSERT INTO u VALUES (1, 'a@b'), (2, 'c@d')`,
		`UPDATE u SET email = 'e@f' WHERE id = 1; UPDATE u SET id = 3 WHERE id = 2`,
		`INSERT INTO m VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 2, 'c')`,
		`UPDATE m SET k = 2 WHERE id = 1`,
		`BEGIN; INSERT INTO m VALUES (4, 1, 'd'); TRUNCATE m; INSERT INTO m VALUES (5, 2, 'e'); COMMIT`,
		`INSERT INTO p VALUES (1, 1), (2, 2); INSERT INTO c VALUES (10, 1), (11, 2), (12, 2)`,
		`DELETE FROM p WHERE id = 2`,
		`INSERT INTO dropped VALUES (1, 'x'), (2, NULL)`,
		`UPDATE dropped SET v = 'y' WHERE id = 2`,
		`BEGIN; SAVEPOINT s; DELETE FROM t; ROLLBACK TO s; DELETE FROM t WHERE id = 2; COMMIT`,
	}
	var entries []*pb.LogEntry
	for i, sql := range workload {
		conn := f.conn
		if i%2 == 1 {
			conn = odd
		}
		entries = f.logEntries(entries, conn, sql)
	}

	bconn := applyTarget(t, append(schema, `CREATE TABLE dropped (id int PRIMARY KEY, v text)`)...)
	applyAll(t, bconn, entries)
	f.sameRows(bconn, "t", "k", "tz", "ak", "u", "m1", "m2", "p", "c", "dropped")
}
