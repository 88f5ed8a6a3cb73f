package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// Protocol edge cases of the deferred BEGIN (deferbegin.go), found in the
// review of session 5 (h21): the proxy answers a plain BEGIN itself, so
// whatever the client sends next (pipelined units, a Flush instead of a
// Sync, a statement the proxy refuses, transaction characteristics, COPY)
// must behave as it does against PostgreSQL.
func TestDeferredBeginProtocolEdges(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, notices := c.connectNoticed(0)
	other := c.connect(1)
	execSQL(t, conn, "CREATE TABLE edge (id int PRIMARY KEY, v text)")
	pg := conn.PgConn()
	if _, err := pg.Prepare(ctx, "b", "BEGIN", nil); err != nil {
		t.Fatal(err)
	}
	simple, mustSimple, wantStatus := simpleQueries(t, ctx, pg)

	t.Run("pipelined units: a deferred BEGIN, an error, a statement in the failed block", func(t *testing.T) {
		p := pg.StartPipeline(ctx)
		p.SendQueryPrepared("b", nil, nil, nil) // Bind, Describe, Execute: deferred
		p.SendPipelineSync()
		p.SendQueryParams("SELECT no_such_column FROM edge", nil, nil, nil, nil)
		p.SendPipelineSync()
		p.SendQueryParams("SELECT 1", nil, nil, nil, nil)
		p.SendPipelineSync()
		if err := p.Flush(); err != nil { // all three units in one write
			t.Fatal(err)
		}
		var codes []string
		syncs := 0
		for syncs < 3 {
			r, err := p.GetResults()
			if err != nil {
				codes = append(codes, sqlState(err))
				continue
			}
			switch v := r.(type) {
			case *pgconn.ResultReader:
				res := v.Read()
				if res.Err != nil {
					codes = append(codes, sqlState(res.Err))
				} else {
					codes = append(codes, res.CommandTag.String())
				}
			case *pgconn.PipelineSync:
				syncs++
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(codes, ","); got != "BEGIN,42703,25P02" {
			t.Fatalf("pipelined results %s, want BEGIN,42703,25P02", got)
		}
		wantStatus('E')
		mustSimple("ROLLBACK")
		wantStatus('I')
	})

	t.Run("a Flush instead of a Sync after a deferred BEGIN", func(t *testing.T) {
		mustSimple("BEGIN")
		p := pg.StartPipeline(ctx)
		p.SendQueryParams("INSERT INTO edge VALUES (1, 'flushed') RETURNING id", nil, nil, nil, nil)
		p.SendFlushRequest()
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		r, err := p.GetResults()
		if err != nil {
			t.Fatal(err)
		}
		rr, ok := r.(*pgconn.ResultReader)
		if !ok {
			t.Fatalf("first result %T, want the INSERT's rows", r)
		}
		if res := rr.Read(); res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != "1" {
			t.Fatalf("INSERT ... RETURNING before Sync: %v %v", res.Err, res.Rows)
		}
		if err := p.Sync(); err != nil {
			t.Fatal(err)
		}
		if r, err := p.GetResults(); err != nil {
			t.Fatal(err)
		} else if _, ok := r.(*pgconn.PipelineSync); !ok {
			t.Fatalf("after Sync: %T", r)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		wantStatus('T')
		mustSimple("COMMIT")
		wantStatus('I')
	})

	t.Run("PREPARE TRANSACTION after a deferred BEGIN fails the block", func(t *testing.T) {
		mustSimple("BEGIN")
		if err := simple("PREPARE TRANSACTION 'x'"); sqlState(err) != "0A000" {
			t.Fatalf("PREPARE TRANSACTION: %v, want 0A000", err)
		}
		wantStatus('E')
		if err := simple("SELECT 1"); sqlState(err) != "25P02" {
			t.Fatalf("statement after the refusal: %v, want 25P02", err)
		}
		mustSimple("ROLLBACK")
		wantStatus('I')
	})

	t.Run("transaction characteristics set after a deferred BEGIN", func(t *testing.T) {
		mustSimple("BEGIN")
		mustSimple("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE") // mapped to REPEATABLE READ, with a notice
		var iso string
		if err := conn.QueryRow(ctx, "SHOW transaction_isolation").Scan(&iso); err != nil || iso != "repeatable read" {
			t.Fatalf("isolation %q (%v), want repeatable read", iso, err)
		}
		mustSimple("ROLLBACK")
		if got := notices(); !strings.Contains(got, "mapped to REPEATABLE READ") {
			t.Fatalf("no notice of the isolation mapping; notices %q", got)
		}

		mustSimple("BEGIN")
		mustSimple("SET TRANSACTION READ ONLY")
		if err := simple("INSERT INTO edge VALUES (2, 'read only')"); sqlState(err) != "25006" {
			t.Fatalf("write in a READ ONLY block: %v, want 25006", err)
		}
		mustSimple("ROLLBACK")
	})

	t.Run("SET LOCAL, LOCK, savepoints and COPY in a deferred block", func(t *testing.T) {
		mustSimple("BEGIN")
		mustSimple("SET LOCAL statement_timeout = '5s'")
		mustSimple("LOCK TABLE edge IN ROW EXCLUSIVE MODE")
		mustSimple("SAVEPOINT s")
		mustSimple("INSERT INTO edge VALUES (3, 'rolled back to the savepoint')")
		mustSimple("ROLLBACK TO SAVEPOINT s")
		if _, err := pg.CopyFrom(ctx, strings.NewReader("4\tcopied\n5\tcopied\n"), "COPY edge FROM STDIN"); err != nil {
			t.Fatal(err)
		}
		mustSimple("COMMIT")
		wantStatus('I')
		var timeout string
		if err := conn.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "0" {
			t.Fatalf("statement_timeout %q (%v) after the block, want 0: SET LOCAL ends with it", timeout, err)
		}
	})

	t.Run("COPY as the first statement of a deferred block", func(t *testing.T) {
		mustSimple("BEGIN")
		if _, err := pg.CopyFrom(ctx, strings.NewReader("6\tcopied first\n"), "COPY edge FROM STDIN"); err != nil {
			t.Fatal(err)
		}
		wantStatus('T')
		mustSimple("COMMIT")
	})

	c.converge(30 * time.Second)
	var ids []int
	rows, err := other.Query(ctx, "SELECT id FROM edge ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids); got != "[1 4 5 6]" {
		t.Fatalf("the other replica has rows %s, want [1 4 5 6]", got)
	}
}

// A Parse the proxy rewrites to REPEATABLE READ keeps the parameter types
// the client declared: PostgreSQL takes a Bind with that many arguments,
// and so must the rewritten statement (review h40: the rewrite dropped
// them, and the Bind failed with 08P01).
func TestIsolationRewriteKeepsDeclaredParameterTypes(t *testing.T) {
	c := startCluster(t, 1, proxy.ModeMW)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg := c.connect(0).PgConn()
	if _, err := pg.Prepare(ctx, "serializable", "BEGIN ISOLATION LEVEL SERIALIZABLE", []uint32{23}); err != nil {
		t.Fatalf("PREPARE with a parameter type: %v", err)
	}
	res := pg.ExecPrepared(ctx, "serializable", [][]byte{[]byte("1")}, nil, nil).Read()
	if res.Err != nil || res.CommandTag.String() != "BEGIN" {
		t.Fatalf("the rewritten BEGIN with its one argument: tag %q, err %v", res.CommandTag, res.Err)
	}
	if _, err := pg.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
		t.Fatal(err)
	}
}
