package proxy_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// A client that starts COPY FROM STDIN with Parse, Bind, Execute and Sync
// together (as libpq does), sends its data and CopyDone, and leaves without
// the second Sync PostgreSQL waits for: its session ends, and the proxy
// still serves and stops. Found by FuzzProxyClientMessages: the session
// stayed blocked on the backend for ever, and Proxy.Run never returned.
// The regular case, with the second Sync, is wiretest script 25.
func TestCopyInClientLeavingBeforeItsSecondSyncEndsTheSession(t *testing.T) {
	fp := startFuzzProxy(t)
	fp.exchange(t, true, enc(t,
		&pgproto3.Parse{Query: "COPY fuzz_kv FROM STDIN"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.CopyData{Data: []byte("100\tx\n")}, &pgproto3.CopyDone{}))
}
