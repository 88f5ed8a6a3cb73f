package proxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// A write outside a transaction block, then COMMIT, in one extended-protocol
// pipeline (no BEGIN): PostgreSQL commits its implicit transaction at the
// COMMIT. The proxy had opened a block for the write and forwarded the
// COMMIT, which committed the write on this replica only, uncertified: the
// other replicas never got it. Found reading splitUnit at the end of
// session 2. A write after the COMMIT in the same pipeline is wrapped and
// certified again.
func TestAutocommitWriteThenCommitInOnePipelineIsCertified(t *testing.T) {
	c := startCluster(t, 2, proxy.ModeMW)
	conn := c.connect(0)
	ctx := context.Background()
	execSQL(t, conn, "CREATE TABLE pipecommit (id int PRIMARY KEY)")
	p := conn.PgConn().StartPipeline(ctx)
	p.SendQueryParams("INSERT INTO pipecommit VALUES (1)", nil, nil, nil, nil)
	p.SendQueryParams("COMMIT", nil, nil, nil, nil)
	p.SendQueryParams("INSERT INTO pipecommit VALUES (2)", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	var tags []string
	for done := false; !done; {
		r, err := p.GetResults()
		if err != nil {
			t.Fatal(err)
		}
		switch v := r.(type) {
		case *pgconn.ResultReader:
			res := v.Read()
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			tags = append(tags, res.CommandTag.String())
		case *pgconn.PipelineSync, nil:
			done = true
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(tags) != 3 || tags[1] != "COMMIT" {
		t.Fatalf("command tags %q", tags)
	}
	c.converge(20 * time.Second) // compares the replicas' checksums
	var n int
	if err := c.direct(1).QueryRow(ctx, "SELECT count(*) FROM pipecommit").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("the other replica has %d rows, want 2", n)
	}
}
