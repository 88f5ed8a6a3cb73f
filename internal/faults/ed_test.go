package faults

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestAFailedSafeCommitIsAFailure(t *testing.T) {
	err := &pgconn.PgError{Code: "TK006", Message: "the transaction failed: the certifier lost its version 12 (epoch 7) before it became durable; nothing of it remains anywhere"}
	if got := commitOutcome(err); got != Fail {
		t.Errorf("FATAL TK006 at COMMIT is %s, want fail", got)
	}
	if ref, ok := parseRef(err.Message); !ok || ref != (txnRef{Version: 12, Epoch: 7}) {
		t.Errorf("parsed %v %v from %q", ref, ok, err.Message)
	}
}

// edFixture is a history of four transactions: a fast append of 1 that
// failed, a fast append of 2 that stayed durable, a fast read of [1] and
// a fast read of [2].
func edFixture() (*listAppend, map[txnRef]string) {
	la := newListAppend("t")
	la.ed = newEDLedger(50)
	failed, durable := txnRef{Version: 5, Epoch: 1}, txnRef{Version: 5, Epoch: 2}
	add := func(kind edKind, ref txnRef, m Mop) {
		i := la.hist.Add(OK, 0, []Mop{m}, "")
		la.ed.add(edTxn{kind: kind, op: i, ref: ref, mops: []Mop{m}})
	}
	add(edFastWrite, failed, Mop{Kind: Append, Key: 0, Value: 1})
	add(edFastWrite, durable, Mop{Kind: Append, Key: 0, Value: 2})
	add(edFastRead, txnRef{}, Mop{Kind: Read, Key: 0, Values: []int{1}})
	add(edFastRead, txnRef{}, Mop{Kind: Read, Key: 0, Values: []int{2}})
	return la, map[txnRef]string{failed: "failed", durable: "durable"}
}

func TestAFailedFastCommitAndItsReadersBecomeFailures(t *testing.T) {
	la, states := edFixture()
	res := &EDResult{}
	la.ed.apply(la, states, res)
	if len(res.Violations) > 0 {
		t.Fatalf("violations: %v", res.Violations)
	}
	want := []OpType{Fail, OK, Fail, OK}
	for i, w := range want {
		if got := la.hist.TypeAt(i); got != w {
			t.Errorf("op %d is %s, want %s", i, got, w)
		}
	}
	if res.FastFailed != 1 || res.FastReadsFailed != 1 || la.ackedCount() != 1 {
		t.Errorf("fast failed %d, fast reads failed %d, acknowledged appends %d; want 1, 1, 1", res.FastFailed, res.FastReadsFailed, la.ackedCount())
	}
	if v := la.ed.finalViolations("t", map[int][]int{0: {2}}, la.hist); len(v) > 0 {
		t.Errorf("a final state without the failed append: %v", v)
	}
	if v := la.ed.finalViolations("t", map[int][]int{0: {1, 2}}, la.hist); len(v) == 0 {
		t.Error("a replica that keeps a failed append was not reported")
	}
}

func TestASafeCommitThatFailedIsAViolation(t *testing.T) {
	la := newListAppend("t")
	la.ed = newEDLedger(50)
	ref := txnRef{Version: 3, Epoch: 1}
	i := la.hist.Add(OK, 0, []Mop{{Kind: Append, Key: 0, Value: 1}}, "")
	la.ed.add(edTxn{kind: edSafeWrite, op: i, ref: ref, mops: []Mop{{Kind: Append, Key: 0, Value: 1}}})
	res := &EDResult{}
	la.ed.apply(la, map[txnRef]string{ref: "failed"}, res)
	if len(res.Violations) != 1 || !strings.Contains(res.Violations[0], "ED recoverability") {
		t.Errorf("violations %v, want one of ED recoverability", res.Violations)
	}
}
