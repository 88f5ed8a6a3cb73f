package capture_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// randomTables are the random workload's tables, on both servers.
var randomTables = []string{
	`CREATE TABLE r (id int PRIMARY KEY, v int, u int UNIQUE)`,
	`CREATE TABLE s (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v int)`,
	`CREATE TABLE n (id int PRIMARY KEY, v int)`,
	`CREATE TABLE w (id int, k int, v int, PRIMARY KEY (id, k)) PARTITION BY LIST (k)`,
	`CREATE TABLE w0 PARTITION OF w FOR VALUES IN (0)`,
	`CREATE TABLE w1 PARTITION OF w FOR VALUES IN (1)`,
	`CREATE TABLE q (a int, b int)`, // no primary key: equal rows happen
}

// randomTriggers, on the origin only, write rows from inside other
// statements: after an UPDATE of n, delete the row (v % 10 = 9) or
// update it again (v % 10 = 1), from triggers that fire before and after
// capture; after a DELETE of n, put the row back (v % 10 = 7); before an
// INSERT into n, delete the row with the key (an "upsert by trigger").
var randomTriggers = []string{
	`CREATE FUNCTION n_delete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM n WHERE id = NEW.id; RETURN NULL; END $$`,
	`CREATE FUNCTION n_bump() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN UPDATE n SET v = v + 1 WHERE id = NEW.id; RETURN NULL; END $$`,
	`CREATE FUNCTION n_restore() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO n VALUES (OLD.id, OLD.v + 1); RETURN NULL; END $$`,
	`CREATE FUNCTION n_replace() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM n WHERE id = NEW.id; RETURN NEW; END $$`,
	`CREATE TRIGGER a_delete AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v % 10 = 9 AND NEW.id % 2 = 0) EXECUTE FUNCTION n_delete()`,
	`CREATE TRIGGER z_delete AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v % 10 = 9 AND NEW.id % 2 = 1) EXECUTE FUNCTION n_delete()`,
	`CREATE TRIGGER a_bump AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v % 10 = 1 AND NEW.id % 2 = 0) EXECUTE FUNCTION n_bump()`,
	`CREATE TRIGGER z_bump AFTER UPDATE ON n FOR EACH ROW WHEN (NEW.v % 10 = 1 AND NEW.id % 2 = 1) EXECUTE FUNCTION n_bump()`,
	`CREATE TRIGGER a_restore AFTER DELETE ON n FOR EACH ROW WHEN (OLD.v % 10 = 7) EXECUTE FUNCTION n_restore()`,
	`CREATE TRIGGER b_replace BEFORE INSERT ON n FOR EACH ROW EXECUTE FUNCTION n_replace()`,
}

func randomStatement(rng *rand.Rand) string {
	k, k2, v := rng.IntN(8), rng.IntN(8), rng.IntN(40)
	switch rng.IntN(20) {
	case 0:
		return fmt.Sprintf(`INSERT INTO r VALUES (%d, %d, %d) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v`, k, v, 100+k)
	case 1:
		return fmt.Sprintf(`UPDATE r SET v = v + %d, u = CASE WHEN u IS NULL THEN %d END WHERE id = %d`, v, 200+k, k)
	case 2:
		return fmt.Sprintf(`UPDATE r SET id = %d WHERE id = %d AND NOT EXISTS (SELECT FROM r WHERE id = %d)`, k2, k, k2)
	case 3:
		return fmt.Sprintf(`DELETE FROM r WHERE id BETWEEN %d AND %d`, k, k+rng.IntN(3))
	case 4:
		return fmt.Sprintf(`INSERT INTO s VALUES (%d, %d) ON CONFLICT DO NOTHING`, k, v)
	case 5:
		return fmt.Sprintf(`UPDATE s SET id = %d - id, v = v + 1 WHERE id IN (%d, %d)`, k+k2, k, k2)
	case 6:
		return fmt.Sprintf(`DELETE FROM s WHERE id = %d`, k)
	case 7, 8:
		return fmt.Sprintf(`INSERT INTO n VALUES (%d, %d)`, k, v)
	case 9, 10:
		return fmt.Sprintf(`UPDATE n SET v = %d WHERE id BETWEEN %d AND %d`, v, k, k+rng.IntN(2))
	case 11:
		return fmt.Sprintf(`DELETE FROM n WHERE id = %d`, k)
	case 12:
		return fmt.Sprintf(`INSERT INTO w VALUES (%d, %d, %d) ON CONFLICT DO NOTHING`, k, rng.IntN(2), v)
	case 13:
		return fmt.Sprintf(`UPDATE w SET k = 1 - k, v = %d WHERE id = %d`, v, k)
	case 14:
		return []string{`TRUNCATE r`, `TRUNCATE w`, `TRUNCATE s, n`, `TRUNCATE q`}[rng.IntN(4)]
	case 16:
		return fmt.Sprintf(`INSERT INTO q SELECT %d, %d FROM generate_series(1, %d)`, k%3, v%3, 1+rng.IntN(3))
	case 17:
		return fmt.Sprintf(`UPDATE q SET b = (b + %d) %% 3 WHERE a = %d`, 1+rng.IntN(2), k%3)
	case 18:
		return fmt.Sprintf(`DELETE FROM q WHERE ctid = (SELECT min(ctid) FROM q WHERE a = %d)`, k%3)
	case 19:
		return fmt.Sprintf(`DELETE FROM q WHERE a = %d AND b = %d`, k%3, v%3)
	default:
		return fmt.Sprintf(`DELETE FROM w WHERE id = %d`, k)
	}
}

// randomTransaction is one transaction: statements, some in savepoints
// that roll back, some in PL/pgSQL blocks whose errors are caught.
func randomTransaction(rng *rand.Rand) string {
	var b strings.Builder
	b.WriteString("BEGIN;\n")
	for i, n := 0, 1+rng.IntN(6); i < n; i++ {
		switch rng.IntN(6) {
		case 0:
			fmt.Fprintf(&b, "SAVEPOINT p;\n%s;\n%s;\nROLLBACK TO p;\n", randomStatement(rng), randomStatement(rng))
		case 1:
			fmt.Fprintf(&b, "DO $$ BEGIN %s; %s; RAISE EXCEPTION 'undo'; EXCEPTION WHEN OTHERS THEN NULL; END $$;\n",
				randomStatement(rng), randomStatement(rng))
		default:
			fmt.Fprintf(&b, "%s;\n", randomStatement(rng))
		}
	}
	b.WriteString("COMMIT")
	return b.String()
}

// Random transactions on one server, their writesets applied in order on
// another: both end with the same rows. A transaction that fails (a
// constraint it breaks) rolls back on the origin and certifies nothing.
func TestRandomTransactionsApply(t *testing.T) {
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	f := start(t, append(slices.Clone(randomTables), randomTriggers...)...)
	bconn := applyTarget(t, randomTables...)

	const pin = `SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'`
	f.exec(f.conn, pin)
	f.exec(bconn, pin)
	dump := func(q func(string) []string) []string {
		var out []string
		for _, table := range []string{"r", "s", "n", "w0", "w1", "q"} {
			out = append(out, q(`SELECT '`+table+`: ' || coalesce(string_agg(x::text, ' ' ORDER BY x::text), '') FROM `+table+` AS x`)...)
		}
		return out
	}
	applier := replica.NewApplier()
	version := uint64(0)
	failed := 0
	transactions := 300
	if testing.Short() {
		transactions = 60
	}
	for i := range transactions {
		sql := randomTransaction(rng)
		before := len(f.agent.Requests())
		_, err := f.conn.Exec(ctx, sql)
		reqs := f.agent.Requests()[before:]
		if err != nil {
			if len(reqs) > 0 {
				t.Fatalf("transaction %d failed (%v) but certified:\n%s", i, err, sql)
			}
			f.exec(f.conn, "ROLLBACK")
			failed++
		}
		for _, r := range reqs {
			version++
			if err := applier.Apply(ctx, bconn, []*pb.LogEntry{{Version: version, Writeset: r.Writeset}}); err != nil {
				t.Fatalf("transaction %d: apply %q: %v\n%s", i, render(r.Writeset), err, sql)
			}
		}
		a, bb := dump(func(q string) []string { return f.query(f.conn, q) }), dump(func(q string) []string { return f.query(bconn, q) })
		if !slices.Equal(a, bb) {
			var ws []string
			for _, r := range reqs {
				ws = append(ws, render(r.Writeset)...)
			}
			t.Fatalf("after transaction %d (seed %d):\n%s\nwriteset:\n  %s\norigin:\n  %s\napplied:\n  %s", i, seed, sql,
				strings.Join(ws, "\n  "), strings.Join(a, "\n  "), strings.Join(bb, "\n  "))
		}
	}
	t.Logf("%d transactions: %d certified, %d failed", transactions, version, failed)
}
