package certification

import "testing"

// The fault point of the fault harness's detector self-test
// (internal/faults): with UnsafeSkipConflictCheck a write-write conflict that
// first-committer-wins must abort (Tashkent §2, GSI) commits instead.
func TestUnsafeSkipConflictCheckCommitsConflicts(t *testing.T) {
	key := []Key{RowKey("t", []byte("1"))}
	for _, unsafe := range []bool{false, true} {
		s := New(Config{WindowVersions: 100, UnsafeSkipConflictCheck: unsafe}, 0)
		first := s.Certify(Request{Txn: TxnID{"a", 1}, StartVersion: 0, Keys: key})
		second := s.Certify(Request{Txn: TxnID{"b", 1}, StartVersion: 0, Keys: key})
		if first.Decision != Commit {
			t.Fatalf("unsafe=%v: first writer: %v", unsafe, first.Decision)
		}
		want := Abort
		if unsafe {
			want = Commit
		}
		if second.Decision != want {
			t.Fatalf("unsafe=%v: concurrent second writer: %v, want %v", unsafe, second.Decision, want)
		}
	}
}
