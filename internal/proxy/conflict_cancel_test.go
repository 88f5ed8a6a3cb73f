package proxy

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestEveryCancelOfTheLockWatchReadsAsASerializationFailure: the lock
// watch cancels again every lockWatchInterval until the remote writeset
// gets its lock, and a cancel can land one statement late. Both 57014s
// it causes, not only the first, are 40001 (pgbench in the TPC-B test
// once got the second as 57014 and stopped); a 57014 long after any
// cancel of the lock watch stays what it is.
func TestEveryCancelOfTheLockWatchReadsAsASerializationFailure(t *testing.T) {
	s := &session{}
	canceled := &pgproto3.ErrorResponse{Severity: "ERROR", Code: codeQueryCanceled, Message: "canceling statement due to user request"}
	if got := s.rewriteError(canceled).Code; got != codeQueryCanceled {
		t.Fatalf("without a cancel of the lock watch: %s, want %s", got, codeQueryCanceled)
	}
	s.conflictCancelAt.Store(int64(sinceProcessStart(time.Now())))
	for i := range 2 {
		if got := s.rewriteError(canceled).Code; got != codeSerializationFailure {
			t.Fatalf("57014 number %d after the lock watch's cancel: %s, want %s", i+1, got, codeSerializationFailure)
		}
	}
	s.conflictCancelAt.Store(int64(sinceProcessStart(time.Now().Add(-2 * conflictCancelWindow))))
	if got := s.rewriteError(canceled).Code; got != codeQueryCanceled {
		t.Fatalf("57014 %s after the lock watch's cancel: %s, want %s", 2*conflictCancelWindow, got, codeQueryCanceled)
	}
	if canceled.Code != codeQueryCanceled {
		t.Fatal("rewriteError changed the message it was given")
	}
}
