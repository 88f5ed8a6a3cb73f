package pgtest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DurableVersion is tashkent.durable_version() on conn: the certifier's
// durable version as the server last heard it, nil (NULL) if it heard
// none since it started.
func DurableVersion(t testing.TB, conn *pgx.Conn) *int64 {
	t.Helper()
	var v *int64
	if err := conn.QueryRow(context.Background(), `SELECT tashkent.durable_version()`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// ShowVersion prints a version that may be NULL.
func ShowVersion(v *int64) string {
	if v == nil {
		return "NULL"
	}
	return strconv.FormatInt(*v, 10)
}

// AwaitDurableVersion polls tashkent.durable_version() on conn until it
// is at least v, and fails the test if it is not within the time given.
func AwaitDurableVersion(t testing.TB, conn *pgx.Conn, v int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := DurableVersion(t, conn)
		if got != nil && *got >= v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("durable_version() is %s, want at least %d within %v", ShowVersion(got), v, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
