package compat

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// proxyBug is a known bug of the proxy: a client behaviour that works
// directly against PostgreSQL and fails through the cluster.
type proxyBug struct {
	id      string
	summary string
	// scenarios ("suite/scenario", or "suite/*" for all of a suite's) that
	// fail through the cluster because of it. Each is an expected failure
	// there, and only there.
	scenarios []string
	// repro is the minimal wire-level reproduction: it returns nil when the
	// server behaves as PostgreSQL does. It is run directly (must pass) and
	// through a proxy (fails while the bug is there).
	repro func(ctx context.Context, dsn string) error
}

// knownProxyBugs is THE list of expected failures. Nothing else in this
// package marks a scenario as expected to fail. When a bug is fixed its
// scenarios pass through the cluster and the test fails until the entry is
// removed here.
var knownProxyBugs = []proxyBug{}

// fixedProxyBugs are bugs that were on knownProxyBugs. Their reproductions
// stay as regression tests: they must pass directly and through the proxy.
var fixedProxyBugs = []proxyBug{
	{
		id: "flush-before-sync",
		summary: "the proxy did not answer extended-protocol messages until Sync, so a client that sends Flush and " +
			"waits for the answer (asyncpg prepares every statement with Parse+Describe+Flush; pg-cursor reads with " +
			"Execute(max rows)+Flush) hung",
		repro: reproFlush,
	},
	{
		id: "flush-then-query",
		summary: "a Flush that no Sync follows, then a simple Query, made the proxy close the connection " +
			"(psycopg's pipeline mode ends every pipeline with Sync + Flush)",
		repro: reproFlushThenQuery,
	},
}

// knownBug returns the id of the known proxy bug that makes a suite's
// scenario fail through the cluster, or "".
func knownBug(suiteName, scenario string) string {
	key := suiteName + "/" + scenario
	for _, b := range knownProxyBugs {
		for _, s := range b.scenarios {
			if s == key || s == suiteName+"/*" {
				return b.id
			}
		}
	}
	return ""
}

func printKnownBugs(t *testing.T) {
	var lines []string
	for _, b := range knownProxyBugs {
		sc := append([]string(nil), b.scenarios...)
		sort.Strings(sc)
		affected := strings.Join(sc, ", ")
		if affected == "" {
			affected = "no scenario of the suites; see its reproduction"
		}
		lines = append(lines, fmt.Sprintf("KNOWN PROXY BUG %s: %s\n    expected to fail through the cluster: %s", b.id, b.summary, affected))
	}
	if len(lines) > 0 {
		t.Logf("\n%s\n(list: knownProxyBugs in internal/compat/known_bugs_test.go; reproductions: TestCompat/known_proxy_bugs)", strings.Join(lines, "\n"))
	}
}

// runReproductions runs every known bug's reproduction directly (where it
// must pass: it shows what PostgreSQL does) and through proxy 1; and every
// fixed bug's, which must pass both ways.
func runReproductions(t *testing.T, tg []target) {
	for _, b := range fixedProxyBugs {
		t.Run("fixed/"+b.id, func(t *testing.T) {
			for _, x := range tg {
				dsn := fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", compatUser, urlEscape(compatPassword), x.host, x.port, compatDatabase)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				if err := b.repro(ctx, dsn); err != nil {
					t.Errorf("regression of %s (%s) through %s: %v", b.id, b.summary, x.name, err)
				}
				cancel()
			}
		})
	}
	for _, b := range knownProxyBugs {
		if b.repro == nil {
			continue
		}
		t.Run(b.id, func(t *testing.T) {
			for _, x := range tg {
				dsn := fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", compatUser, urlEscape(compatPassword), x.host, x.port, compatDatabase)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := b.repro(ctx, dsn)
				cancel()
				switch {
				case x.name == "direct" && err != nil:
					t.Errorf("the reproduction fails directly against PostgreSQL, so it shows nothing: %v", err)
				case x.name == "direct":
				case err != nil:
					t.Logf("KNOWN PROXY BUG %s reproduced through the proxy: %v", b.id, err)
				default:
					t.Errorf("%s no longer reproduces through the proxy: remove it from knownProxyBugs", b.id)
				}
			}
		})
	}
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// rawConn authenticates with pgconn and hands over the connection to speak
// the protocol message by message.
func rawConn(ctx context.Context, dsn string) (*pgconn.HijackedConn, error) {
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	h, err := c.Hijack()
	if err != nil {
		return nil, err
	}
	return h, nil
}

// expect reads messages until it has seen the wanted types in order, with a
// deadline for the lot.
func expect(h *pgconn.HijackedConn, within time.Duration, what string, want ...string) error {
	h.Conn.SetReadDeadline(time.Now().Add(within))
	defer h.Conn.SetReadDeadline(time.Time{})
	var got []string
	for len(got) < len(want) {
		msg, err := h.Frontend.Receive()
		if err != nil {
			return fmt.Errorf("%s: want %v, got %v then: %v", what, want, got, err)
		}
		name := fmt.Sprintf("%T", msg)
		name = strings.TrimPrefix(name, "*pgproto3.")
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			name += "(" + e.Code + " " + e.Message + ")"
		}
		got = append(got, name)
		if name != want[len(got)-1] {
			return fmt.Errorf("%s: want %v, got %v", what, want, got)
		}
	}
	return nil
}

// reproFlush: Parse + Describe + Flush must be answered before any Sync,
// as asyncpg's prepare expects; so must Execute with a row limit + Flush
// (pg-cursor).
func reproFlush(ctx context.Context, dsn string) error {
	h, err := rawConn(ctx, dsn)
	if err != nil {
		return err
	}
	defer h.Conn.Close()
	fe := h.Frontend
	fe.Send(&pgproto3.Parse{Name: "s1", Query: "SELECT $1::int + 1"})
	fe.Send(&pgproto3.Describe{ObjectType: 'S', Name: "s1"})
	fe.Send(&pgproto3.Flush{})
	if err := fe.Flush(); err != nil {
		return err
	}
	if err := expect(h, 3*time.Second, "Parse+Describe+Flush (asyncpg's prepare)",
		"ParseComplete", "ParameterDescription", "RowDescription"); err != nil {
		return err
	}
	fe.Send(&pgproto3.Sync{})
	fe.Send(&pgproto3.Query{String: "BEGIN"})
	if err := fe.Flush(); err != nil {
		return err
	}
	if err := expect(h, 3*time.Second, "Sync, BEGIN", "ReadyForQuery", "CommandComplete", "ReadyForQuery"); err != nil {
		return err
	}
	fe.Send(&pgproto3.Parse{Query: "SELECT generate_series(1, 3)"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Execute{MaxRows: 1})
	fe.Send(&pgproto3.Flush{})
	if err := fe.Flush(); err != nil {
		return err
	}
	return expect(h, 3*time.Second, "Parse+Bind+Execute(1 row)+Flush (pg-cursor's read)",
		"ParseComplete", "BindComplete", "DataRow", "PortalSuspended")
}

// reproFlushThenQuery: a lone Flush (after Sync, as psycopg's pipeline sends
// when it ends) and then a simple Query.
func reproFlushThenQuery(ctx context.Context, dsn string) error {
	h, err := rawConn(ctx, dsn)
	if err != nil {
		return err
	}
	defer h.Conn.Close()
	fe := h.Frontend
	fe.Send(&pgproto3.Flush{})
	fe.Send(&pgproto3.Query{String: "SELECT 1"})
	if err := fe.Flush(); err != nil {
		return err
	}
	return expect(h, 3*time.Second, "Flush, then Query SELECT 1",
		"RowDescription", "DataRow", "CommandComplete", "ReadyForQuery")
}
