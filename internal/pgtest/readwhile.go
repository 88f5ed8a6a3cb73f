package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ReadWhile runs sql, a query returning one integer, on conn in a loop
// until the function it returns is called, which stops it and returns how
// many reads succeeded; a read that fails fails the test. It shows that a
// server kept serving reads while something else ran.
func ReadWhile(t testing.TB, conn *pgx.Conn, sql string) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var n int
	var failed error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var v int64
			if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil {
				if ctx.Err() == nil {
					failed = err
				}
				return
			}
			n++
		}
	}()
	return func() int {
		cancel()
		<-done
		if failed != nil {
			t.Fatalf("a read failed: %v", failed)
		}
		return n
	}
}
