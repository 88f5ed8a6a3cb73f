package ddlcapture_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SERIALIZABLE, wherever a statement asks for it, runs as REPEATABLE READ,
// and the session is told once; READ COMMITTED stays READ COMMITTED.
func TestSerializableIsMappedToRepeatableRead(t *testing.T) {
	f := start(t)
	var mu sync.Mutex
	var notices []string
	cfg, err := pgx.ParseConfig(f.a.Server.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	level := func() string {
		return scalar[string](t, c, `SHOW transaction_isolation`)
	}
	// A SET of a session default is sent alone: a multi-statement string
	// runs in one transaction, begun before the SET.
	for _, tc := range []struct{ sql, want string }{
		{`BEGIN ISOLATION LEVEL SERIALIZABLE`, "repeatable read"},
		{`START TRANSACTION READ WRITE, ISOLATION LEVEL SERIALIZABLE`, "repeatable read"},
		{`BEGIN; SET TRANSACTION ISOLATION LEVEL SERIALIZABLE`, "repeatable read"},
		{`BEGIN; SET transaction_isolation = 'serializable'`, "repeatable read"},
		{`BEGIN; SET LOCAL transaction_isolation TO SERIALIZABLE`, "repeatable read"},
		{`BEGIN ISOLATION LEVEL READ COMMITTED`, "read committed"},
		{`BEGIN ISOLATION LEVEL REPEATABLE READ`, "repeatable read"},
		{`SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE`, "repeatable read"},
		{`SET default_transaction_isolation = 'SERIALIZABLE'`, "repeatable read"},
		{`SET SESSION default_transaction_isolation = serializable`, "repeatable read"},
		{`SET default_transaction_isolation = 'read committed'`, "read committed"},
	} {
		f.exec(c, tc.sql)
		if !strings.HasPrefix(tc.sql, "BEGIN") && !strings.HasPrefix(tc.sql, "START") {
			f.exec(c, `BEGIN`)
		}
		if got := level(); got != tc.want {
			t.Errorf("%s: transaction_isolation %q, want %q", tc.sql, got, tc.want)
		}
		f.exec(c, `COMMIT; RESET default_transaction_isolation`)
	}
	if got := scalar[string](t, c, `SHOW default_transaction_isolation`); got != "read committed" {
		t.Errorf("default_transaction_isolation after RESET: %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, m := range notices {
		if strings.Contains(m, "SERIALIZABLE is mapped to REPEATABLE READ") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d notices about the mapping, want 1 per session: %q", n, notices)
	}
}
