package capture_test

import "testing"

// Values of unique indexes other than the primary key are certified as
// OP_UNIQUE_KEY: those an INSERT takes, a DELETE frees, an UPDATE changes
// (old and new), after the row changes, sorted; not where a NULL makes
// them no key, unless the index says NULLS NOT DISTINCT.
func TestUniqueIndexes(t *testing.T) {
	f := start(t,
		`CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE, a int, b int, c int, d int, UNIQUE (a, b), UNIQUE NULLS NOT DISTINCT (c))`,
		`CREATE UNIQUE INDEX "Weird Idx" ON u (d) INCLUDE (a)`,
		`CREATE UNIQUE INDEX u_partial ON u (a) WHERE a > 100`,
		`CREATE UNIQUE INDEX u_expr ON u (lower(email))`)

	f.expect(`INSERT INTO u VALUES (1, 'x@y', 1, NULL, NULL, 4)`,
		`UPSERT public.u [1] (1,x@y,1,,,4)`,
		`UNIQUE_KEY public.u#"Weird Idx" [4]`,
		`UNIQUE_KEY public.u#u_c_key [null]`,
		`UNIQUE_KEY public.u#u_email_key ["x@y"]`)
	f.expect(`UPDATE u SET email = 'z@y'`,
		`UPSERT public.u [1] (1,z@y,1,,,4) keeps`,
		`UNIQUE_KEY public.u#u_email_key ["x@y"]`,
		`UNIQUE_KEY public.u#u_email_key ["z@y"]`)
	// (a, b) has a NULL before and after: no key either time.
	f.expect(`UPDATE u SET a = 5`, `UPSERT public.u [1] (1,z@y,5,,,4) keeps`)
	f.expect(`UPDATE u SET b = 6, c = 7`,
		`UPSERT public.u [1] (1,z@y,5,6,7,4) keeps`,
		`UNIQUE_KEY public.u#u_a_b_key [5,6]`,
		`UNIQUE_KEY public.u#u_c_key [7]`,
		`UNIQUE_KEY public.u#u_c_key [null]`)
	// The same value taken and freed in one transaction: certified once.
	f.expect(`UPDATE u SET email = 'w@y'; UPDATE u SET email = 'z@y'`,
		`UPSERT public.u [1] (1,z@y,5,6,7,4) keeps`,
		`UNIQUE_KEY public.u#u_email_key ["w@y"]`,
		`UNIQUE_KEY public.u#u_email_key ["z@y"]`)
	f.expect(`DELETE FROM u`,
		`DELETE public.u [1]`,
		`UNIQUE_KEY public.u#"Weird Idx" [4]`,
		`UNIQUE_KEY public.u#u_a_b_key [5,6]`,
		`UNIQUE_KEY public.u#u_c_key [7]`,
		`UNIQUE_KEY public.u#u_email_key ["z@y"]`)
}

// A foreign key's parent row is certified as OP_REFERENCE, named exactly
// as the parent's own changes name it: the parent's key through its
// primary key, "<parent>#<index>" and the index's values through another
// unique index; where the child's values could print otherwise (numeric
// 1.5 for the parent's 1.50) or the parent is partitioned, the parent row
// is looked up and its key printed.
func TestForeignKeys(t *testing.T) {
	f := start(t,
		`CREATE TABLE p (id int PRIMARY KEY, code text UNIQUE, n numeric UNIQUE)`,
		`CREATE TABLE q (id bigint PRIMARY KEY, v text)`,
		`CREATE TABLE c (id int PRIMARY KEY, pid int REFERENCES p, pcode varchar(8) REFERENCES p (code),
			pn numeric(10,1) REFERENCES p (n), qid int REFERENCES q)`,
		`CREATE TABLE pp (id int, k int, code text, PRIMARY KEY (id, k), UNIQUE (code, k)) PARTITION BY LIST (k)`,
		`CREATE TABLE pp1 PARTITION OF pp FOR VALUES IN (1)`,
		`CREATE TABLE cc (id int PRIMARY KEY, pid int, pk int, pcode text,
			FOREIGN KEY (pid, pk) REFERENCES pp, FOREIGN KEY (pcode, pk) REFERENCES pp (code, k))`,
		// The parent lookup runs as the parent's owner, row security off,
		// as the foreign key's own check does.
		`ALTER TABLE pp ENABLE ROW LEVEL SECURITY`,
		`ALTER TABLE pp FORCE ROW LEVEL SECURITY`,
		`CREATE ROLE app`,
		`GRANT INSERT ON cc TO app`,
		`CREATE TABLE dc (id int PRIMARY KEY, pid int REFERENCES p DEFERRABLE INITIALLY DEFERRED)`,
		`INSERT INTO p VALUES (1, 'a', 1.50), (2, 'b', 2)`,
		`INSERT INTO q VALUES (1, 'x')`,
		`INSERT INTO pp VALUES (5, 1, 'five')`)

	f.expect(`INSERT INTO c VALUES (10, 1, 'a', 1.5, 1)`,
		`UPSERT public.c [10] (10,1,a,1.5,1)`,
		`REFERENCE public.p [1]`,
		`REFERENCE public.p#p_code_key ["a"]`,
		`REFERENCE public.p#p_n_key [1.50]`,
		`REFERENCE public.q [1]`)
	// A NULL references nothing (MATCH SIMPLE).
	f.expect(`INSERT INTO c VALUES (11, NULL, NULL, NULL, 1)`,
		`UPSERT public.c [11] (11,,,,1)`, `REFERENCE public.q [1]`)
	// An UPDATE references what its changed foreign keys reference.
	f.expect(`UPDATE c SET pcode = 'a' WHERE id = 10`, `UPSERT public.c [10] (10,1,a,1.5,1) keeps`)
	f.expect(`UPDATE c SET pid = 2, pn = 2 WHERE id = 10`,
		`UPSERT public.c [10] (10,2,a,2.0,1) keeps`, `REFERENCE public.p [2]`, `REFERENCE public.p#p_n_key [2]`)
	// The parent written in the same transaction: its own changes cover it.
	f.expect(`INSERT INTO p VALUES (3, 'c', 3); INSERT INTO c VALUES (12, 3, 'c', 3.0, 1)`,
		`UPSERT public.p [3] (3,c,3)`,
		`UPSERT public.c [12] (12,3,c,3.0,1)`,
		`UNIQUE_KEY public.p#p_code_key ["c"]`,
		`UNIQUE_KEY public.p#p_n_key [3]`,
		`REFERENCE public.q [1]`)
	f.expect(`BEGIN; INSERT INTO dc VALUES (1, 7); INSERT INTO p VALUES (7, 'g', 7); COMMIT`,
		`UPSERT public.dc [1] (1,7)`,
		`UPSERT public.p [7] (7,g,7)`,
		`UNIQUE_KEY public.p#p_code_key ["g"]`,
		`UNIQUE_KEY public.p#p_n_key [7]`)
	// A partitioned parent: the partition that holds the row names it, as
	// its own changes do.
	f.expect(`SET ROLE app; INSERT INTO cc VALUES (1, 5, 1, 'five'); RESET ROLE`,
		`UPSERT public.cc [1] (1,5,1,five)`, `REFERENCE public.pp1 [5,1]`, `REFERENCE public.pp1#pp1_code_k_key ["five",1]`)
	f.expect(`DELETE FROM cc; UPDATE pp SET code = 'cinq'; DELETE FROM pp WHERE code = 'cinq'`,
		`DELETE public.cc [1]`, `DELETE public.pp1 [5,1]`, `UNIQUE_KEY public.pp1#pp1_code_k_key ["cinq",1]`, `UNIQUE_KEY public.pp1#pp1_code_k_key ["five",1]`)

	// Keeping updates: q is referenced through its primary key only, p
	// through other unique indexes too, so an UPDATE of p may change a
	// referenced value.
	f.expect(`UPDATE q SET v = 'y'`, `UPSERT public.q [1] (1,y) keeps`)
	f.expect(`UPDATE p SET n = n WHERE id = 2`, `UPSERT public.p [2] (2,b,2)`)
}

// keeps_row: an UPDATE that moved no primary key, and only if every event
// of the key in the transaction was one.
func TestKeepingUpdates(t *testing.T) {
	f := start(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`, `INSERT INTO t VALUES (1, 1), (2, 2)`)
	f.expect(`UPDATE t SET v = v + 1 WHERE id = 1`, `UPSERT public.t [1] (1,2) keeps`)
	f.expect(`UPDATE t SET v = v + 1 WHERE id = 1; UPDATE t SET v = v + 1 WHERE id = 1`, `UPSERT public.t [1] (1,4) keeps`)
	f.expect(`DELETE FROM t WHERE id = 1; INSERT INTO t VALUES (1, 0); UPDATE t SET v = 9 WHERE id = 1`, `UPSERT public.t [1] (1,9)`)
	f.expect(`UPDATE t SET id = 3 WHERE id = 2; UPDATE t SET v = 5 WHERE id = 3`, `DELETE public.t [2]`, `UPSERT public.t [3] (3,5)`)
	// An UPDATE that sets the key to its own value moved nothing.
	f.expect(`UPDATE t SET id = id, v = 6 WHERE id = 3`, `UPSERT public.t [3] (3,6) keeps`)
}
